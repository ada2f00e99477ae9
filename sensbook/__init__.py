"""sensbook: sensitivity profiles and the parameter-space geometry of transformers.

Companion package of the executable book following Kövér, Butoi, Svete, Hahn & Cotterell,
"Understanding the Parameter Space Geometry of Transformers Encoding Boolean Functions"
(ICML 2026).
"""
from .boolean import (FIRST, MAJORITY, MAX_EXHAUSTIVE_N, PARITY, BooleanFunction, Constant,
                      Dictator, Majority, Parity, TruthTable, index_to_strings, random_function,
                      random_function_expected_profile, sparse_majority, sparse_parity, strings,
                      strings_to_index)
from .model import INITS, Recognizer, Trace, blowup, num_parameters, positional_features
from .profile import (ACCEPT, NONFINITE, REJECT, UNDECIDED, Profile, classify, profile_from_table,
                      sampled_profile, sensitivity_profile, truth_table, zero_sensitivity_count)
from .scale import SCALES, banner, device, pick, progress, scale, set_scale

__version__ = "0.1.0"
from .constructions import (CONSTRUCTIONS, construction_parameters, first_transformer,
                            majority_transformer, parity_transformer)
from .volume import (Agreement, FunctionCensus, affine_class, agreement, basin_curve, census_from_ids,
                     critical_sigma, fit_power, ids_to_tables, parameter_function_map, perturb,
                     table_ids, theorem45_bound, wilson_interval)
