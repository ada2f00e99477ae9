"""sensbook: sensitivity profiles and the parameter-space geometry of transformers.

Companion package of the executable book following Kövér, Butoi, Svete, Hahn & Cotterell,
"Understanding the Parameter Space Geometry of Transformers Encoding Boolean Functions"
(ICML 2026). Modules, in the order the book uses them:

* ``scale``: the ``ci`` / ``book`` / ``paper`` setting, device, progress bars;
* ``boolean``: Boolean functions on {0,1}^N with exact sensitivity profiles (chapter 1);
* ``profile``: the sensitivity profiler for any batched Boolean classifier (chapter 1);
* ``model``: the transformer recognizer, a population of P models at once (chapter 2);
* ``survey``: experiment E1, profiles of random transformers and random functions (chapter 2);
* ``geometry``: eps > 0 and eps = 0: influence, blowup, packing, small-ball law (chapters 3-4);
* ``constructions``, ``volume``: exact PARITY/FIRST/MAJORITY transformers, basins, K_0 growth,
  the parameter-function map (chapter 5);
* ``train``: population training (chapter 6);
* ``experiments``, ``sweep``, ``cli``: every expensive computation as an experiment with stored,
  resumable results (``sensbook list``, ``sensbook sweep``).
"""
from importlib.metadata import PackageNotFoundError, version as _version

from .boolean import (FIRST, MAJORITY, MAX_EXHAUSTIVE_N, PARITY, BooleanFunction, Constant,
                      Dictator, Majority, Parity, TruthTable, index_to_strings, poisson_tv_bound,
                      random_function, random_function_expected_profile, sparse_majority,
                      sparse_parity, strings, strings_to_index)
from .constructions import (CONSTRUCTIONS, construction_parameters, first_transformer,
                            majority_transformer, parity_transformer)
from .geometry import (Recognition, blowup_bound, danger_center, distinct_functions,
                       exceedance, exhaustive_influence, flip_bits, flip_influence,
                       layer_norm_variances, lipschitz_theta, output_table, random_strings,
                       recognition, small_ball_cdf, small_ball_exponent, with_flips)
from .model import INITS, Recognizer, Trace, blowup, num_parameters, positional_features
from .profile import (ACCEPT, NONFINITE, REJECT, UNDECIDED, Profile, classify, profile_from_table,
                      sampled_profile, sensitivity_profile, truth_table, zero_sensitivity_count)
from .profile import check_device, rounding_margin
from .scale import SCALES, banner, device, pick, progress, scale, set_scale
from .survey import random_function_k0, random_transformer_survey
from .experiments import EXPERIMENTS, Experiment, experiments, run_experiment
from .experiments import select as experiments_select
from .sweep import Store, Sweep, key, results_dir, run_sweep
from .sweep import version as results_version
from .train import (CH6_SIZES, CH6_TARGETS, Protocol, accuracy, analyse, ch6_configs, ch6_length,
                    ch6_rows, ch6_sweep, ch6_table, init_population, population_loss, profile_tv,
                    reference_distance, run_config, train_population)
from .train import target as target_function
from .volume import (Agreement, FunctionCensus, affine_class, agreement, basin_curve,
                     census_from_ids, critical_sigma, fit_power, ids_to_tables,
                     parameter_function_map, perturb, table_ids, theorem45_bound, wilson_interval)

try:                                   # one source of truth for the version: pyproject.toml
    __version__ = _version("sensbook")
except PackageNotFoundError:           # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
