"""sensbook: sensitivity profiles and the parameter-space geometry of transformers.

Companion package of the executable book following Kövér, Butoi, Svete, Hahn & Cotterell,
"Understanding the Parameter Space Geometry of Transformers Encoding Boolean Functions"
(ICML 2026). The folders are the architecture:

* instruments (this folder), in the order the book uses them: ``adapters`` (a researcher's
  torch, Hugging Face or scikit-learn model as a classifier), ``boolean`` (Boolean functions
  with exact sensitivity profiles), ``labels`` (a classifier's output read as labels, with a
  margin), ``profile`` (the profiler for any batched Boolean classifier), ``model`` (the transformer recognizer, P models at once), ``geometry`` (eps > 0
  and eps = 0: blowup, influence, small-ball law), ``hinge`` (Lemma 2.9 and Cor. 4.3 measured;
  worst-case flips), ``constructions`` (exact PARITY, FIRST and
  MAJORITY transformers), ``volume`` (basins, census, the parameter-function map),
  ``certify`` (interval bounds of T over a box of parameters, certified radii), ``zonotope``
  (tighter bounds by affine arithmetic, boxes grown per parameter tensor), ``attack``
  (the worst theta a search finds in a box, r_up), ``splitting`` (small volumes of the
  solution set by subset simulation), ``train``
  (population training, sharpness), ``mechanism`` (what a trained model uses at eos:
  layer-norm variances, blowup, attention), ``interventions`` (what the labels depend on:
  frozen layer norms, fixed attention, patched activations), ``survival`` (censored steps to learn:
  Kaplan-Meier, accelerated-failure-time fits), ``fourier`` and ``controls`` (Walsh spectra; other architectures);
  ``pages`` (the figure style, printed tables, and explorers that answer on the published page);
  ``settings`` at the bottom (scale, device, progress bars), imported by all;
* ``experiments/``: each chapter's sizes, runners and cost models (``ch1`` ... ``ch7``) and
  :func:`run_experiment`, which the chapters call;
* ``runtime/``: the store of results, sweeps, executors (local, Slurm), the published store;
* ``cli``: ``sensbook list``, ``sensbook sweep``, ``sensbook calibrate``.

Instruments import neither ``experiments`` nor ``runtime``.
"""
from .adapters import SklearnClassifier, TorchClassifier, measure_peak_bytes
from .boolean import (FIRST, MAJORITY, MAX_EXHAUSTIVE_N, PARITY, BooleanFunction, Constant,
                      Dictator, Majority, Parity, TruthTable, index_to_strings, poisson_tv_bound,
                      random_function, random_function_expected_profile, sparse_majority,
                      sparse_parity, strings, strings_to_index)
from .certify import Bounds, certified_radius, output_bounds
from .zonotope import affine_bounds, grow_box, tight_bounds
from .attack import attack, attack_radius
from .splitting import ReadoutScore, recognition_score, subset_volume
from .constructions import (CONSTRUCTIONS, construction_parameters, first_transformer,
                            first_hard_transformer, count_threshold_transformer, score_gap,
                            majority_transformer, parity_transformer)
from .geometry import (Recognition, blowup_bound, danger_center, distinct_functions,
                       exceedance, exhaustive_influence, flip_bits, flip_influence,
                       layer_norm_variances, lipschitz_theta, output_table, power_slope_interval,
                       random_strings, recognition, small_ball_cdf, small_ball_exponent,
                       with_flips)
from .hinge import (flip_hinge, flip_sensitivity, lemma29_ratio, lemma29_slope,
                    maximise_influence, converged_influence)
from .model import INITS, Recognizer, Trace, num_parameters, positional_features
from .labels import ACCEPT, NONFINITE, REJECT, UNDECIDED, classify, rounding_margin
from .profile import (Profile, profile_from_table, sampled_profile, sensitivity_profile,
                      truth_table, zero_sensitivity_count)
from .profiles import compare_profiles, plot_profile
from .survival import (censored_contrast, fit_aft, heldout_loglik, kaplan_meier, logrank,
                       profile_interval)
from .mechanism import blowup, eos_mechanism, eos_regime
from .interventions import (effect, fix_attention, freeze_norms, patch, variance_summary)
from .interventions import scores as intervened_scores
from .pages import STYLE, explore, html_table, text_table, use_style
from .settings import SCALES, check_device, device, pick, progress, scale, set_scale
from .settings import VERSION as __version__
from .train import (Protocol, accuracy, curve_schedule, eval_schedule, gradient_signal,
                    init_population, learn, min_margin, population_loss, train_population)
from .sharpness import top_hessian_eigenvalue
from .boolean import target as target_function
from .volume import random_function_profiles
from .volume import (Agreement, FunctionCensus, affine_class, agreement, basin_curve,
                     census_from_ids, critical_sigma, fit_power, ids_to_tables,
                     parameter_function_map, perturb, table_ids, theorem45_applies, theorem45_bound,
                     theorem45_exponent, t_quantile, wilson_interval)
from .fourier import (closed_form_weights, random_function_weights, spectral_weights,
                      total_influence, walsh_hadamard)
from .controls import ARCHS as CONTROL_ARCHS
from .controls import Population, control_population
from .experiments import EXPERIMENTS, Experiment, banner, registry, run_experiment
from .experiments import get as experiment
from .experiments import select as experiments_select
from .runtime import Store, Sweep, key, results_dir, run_sweep
from .runtime import version as results_version
