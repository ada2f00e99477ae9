"""sensbook: sensitivity profiles and the parameter-space geometry of transformers.

Companion package of the executable book following Kövér, Butoi, Svete, Hahn & Cotterell,
"Understanding the Parameter Space Geometry of Transformers Encoding Boolean Functions"
(ICML 2026).
"""
from .boolean import (FIRST, MAJORITY, MAX_EXHAUSTIVE_N, PARITY, BooleanFunction, Constant,
                      Dictator, Majority, Parity, TruthTable, index_to_strings, poisson_tv_bound,
                      random_function,
                      random_function_expected_profile, sparse_majority, sparse_parity, strings,
                      strings_to_index)
from .model import INITS, Recognizer, Trace, blowup, num_parameters, positional_features
from .profile import (ACCEPT, NONFINITE, REJECT, UNDECIDED, Profile, classify, profile_from_table,
                      sampled_profile, sensitivity_profile, truth_table, zero_sensitivity_count)
from .scale import SCALES, banner, device, pick, progress, scale, set_scale

__version__ = "0.1.0"
from .survey import random_function_k0, random_transformer_survey
from .train import (CH6_SIZES, CH6_TARGETS, Protocol, accuracy, analyse, ch6_configs, ch6_length, ch6_sweep,
                    ch6_rows, ch6_table, init_population, population_loss, profile_tv,
                    reference_distance, run_config,
                    train_population)
from .train import target as target_function
from .sweep import Store, Sweep, get_sweep, key, results_dir, run_sweep
from .sweep import version as results_version
from .geometry import (Recognition, ball_sample, blowup_bound, danger_center, distinct_functions,
                       exceedance, exhaustive_influence, flip_bits, flip_influence, output_table,
                       layer_norm_variances, lipschitz_theta, random_strings,
                       recognition, small_ball_cdf, small_ball_exponent, with_flips)
from .constructions import (CONSTRUCTIONS, construction_parameters, first_transformer,
                            majority_transformer, parity_transformer)
from .volume import (Agreement, FunctionCensus, affine_class, agreement, basin_curve, census_from_ids,
                     critical_sigma, fit_power, ids_to_tables, parameter_function_map, perturb,
                     table_ids, theorem45_bound, wilson_interval)
