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
* ``fourier``, ``controls``: Walsh–Hadamard spectra; other architectures as populations
  (chapter 7);
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
from .survey import (e1_merge, e1_model, merge_random_functions, random_function_profiles,
                     string_to_table)
from .experiments import EXPERIMENTS, Experiment, registry, run_experiment
from .experiments import get as experiment
from .experiments import select as experiments_select
from .sweep import Store, Sweep, key, results_dir, run_sweep
from .sweep import version as results_version
from .train import (CH6_EVAL, CH6_SIZES, CH6_TARGETS, Protocol, accuracy, ch6_configs,
                    ch6_sweep, ch6_table, ch6_times, curve_schedule, eval_schedule, growth_rate,
                    init_population, plateau_exit, population_loss, run_config,
                    train_population)
from .train import target as target_function
from .volume import (Agreement, FunctionCensus, affine_class, agreement, basin_curve,
                     census_from_ids, critical_sigma, fit_power, ids_to_tables,
                     parameter_function_map, perturb, table_ids, theorem45_bound, wilson_interval)
from .volume import (K0_ARCHS, K0_MARGIN, K0_N0, basin_arrays, basin_lengths, basin_merge,
                     basin_sigmas, ch5_sizes, k0_merge, pf_merge)
from .fourier import (closed_form_weights, random_function_weights, spectral_weights,
                      total_influence, walsh_hadamard)
from .controls import ARCHS as CONTROL_ARCHS
from .controls import Population, control_population

try:                                   # one source of truth for the version: pyproject.toml
    __version__ = _version("sensbook")
except PackageNotFoundError:           # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
