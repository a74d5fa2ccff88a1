"""The paper's theory as named functions: heterogeneity, noise constants, bounds, checks.

One function per equation of "On Federated Averaging with Partial Participation under a
General Variance Condition" (Wang, Huang, Johansson, Pu):

- heterogeneity: :func:`sigma_f_star` (eq. 11), :func:`sampling_factor` (eq. 10),
  :func:`bgd_sum` (eq. 3, Table II), :func:`lemma1_slack` (Lemma 1, eq. 12),
  :func:`gradient_dissimilarity`, :func:`infima_check`;
- noise: :func:`oracle_variance`, :func:`abc_constants` and :func:`abc_slack` (eq. 4/8),
  :func:`relaxed_growth_sigma_sq` (eq. 2);
- Theorem 1: :func:`theorem1_values`, :func:`theorem1_x_k`;
- Theorem 2: :func:`theorem2_stepsize_limit` (20), :func:`theorem2_bound` (21),
  :func:`theorem2_stepsize` (22-23), :func:`theorem2_leading_terms` (24), :func:`remark3_nu`,
  :func:`remark3_sampling_dominates` (Remark 3);
- Remark 4 and Table I (against [10]): :func:`yang2021_sampling_term`,
  :func:`table1_rate_bgd`, :func:`table1_rate_abc`;
- Theorem 3: :func:`diminishing_stepsize`, :func:`theorem3_stepsize_limit`,
  :func:`check_theorem3_schedule`;
- against simulation: :func:`theorem2_check`, :func:`theorem3_check` (JSON-ready dicts);
- Lemmas 4-8 by Monte Carlo over one round: :func:`lemma_diagnostics` (both sides of
  (15)-(19) at points x_t, e.g. :func:`run_points` of a run), :func:`lemma_stepsize_limits`,
  the sides of each inequality :func:`lemma4_terms` (15) ... :func:`lemma8_terms` (19);
- learning problems: :func:`smoothness_bound` (closed form, softmax/logistic regression),
  :func:`smoothness_estimate` (power iteration at points), :func:`trajectory_points`
  (iterates of a run, e.g. ``abc_constants(problem, oracle, domain=points)``);
- participation beyond the paper's sampler: :func:`inclusion_probabilities` (pi_i, pi_ij),
  :func:`weight_moments`, :func:`sampling_error` (Lemma 3 / eq. 14 for any sampler with a
  closed form), :func:`stationary_availability` (the Markov availability model),
  :func:`monte_carlo_moments` (the same estimated from drawn rounds, any sampler);
- time: :func:`exponential_staleness` (the staleness law of FedBuff and FedAsync with
  exponential durations);
- compression: :func:`compressor_omega` (unbiased compressors' variance factor),
  :func:`compressor_delta` (contractions), :func:`compression_error` (E ||C(v) - v||^2 at
  v), :func:`compressed_abc` (the ABC constants of a compressed oracle);
- robust aggregation: :func:`robustness` (the empirical (f, kappa)-robustness of a rule
  under an attack), :func:`ipm_contraction`, :func:`median_bias_at_infinity`,
  :func:`trimmed_mean_bias_at_infinity`, :func:`order_statistic_mean`,
  :func:`breakdown_fraction` (from the heterogeneity constant B);
- differential privacy (DP-FedAvg): :func:`dp_epsilon`, :func:`dp_noise_multiplier`,
  :func:`dp_event` (dp-accounting's RDP and PLD accountants);
- gossip and decentralised SGD (``fedjax_abc.decentral``'s topologies): :func:`mixing_matrix`,
  :func:`second_eigenvalue`, :func:`spectral_gap`, :func:`mixing_parameter` (p of Koloskova
  et al., ICML 2020), :func:`consensus_error`, :func:`consensus_bound`,
  :func:`expected_matching_contraction`, D-SGD's Theorem 2 terms :func:`dsgd_bound_terms`
  and :func:`dsgd_iterations`;
- personalisation on quadratic clients f_i = (a_i/2) ||x - b_i||^2 (exact gradients, full
  participation): :func:`quadratic_fixed_point` (Q local steps on effective curvatures c_i),
  :func:`fedavg_fixed_point`; Ditto :func:`ditto_personal`, :func:`ditto_fixed_point`;
  pFedMe :func:`moreau_curvature`, :func:`pfedme_curvature`, :func:`pfedme_personal`,
  :func:`pfedme_fixed_point`; Per-FedAvg :func:`perfedavg_curvature`,
  :func:`perfedavg_personal`, :func:`perfedavg_fixed_point`,
  :func:`perfedavg_first_order_bias`; APFL :func:`apfl_personal`, :func:`apfl_fixed_point`;
  :func:`fine_tuned_personal` (each fixed point a :class:`PersonalFixedPoint`);
- fairness and clustering on the same quadratics: q-FFL's two-client point
  :func:`qffl_two_clients` (and its limit q -> infinity), AFL's minimax point
  :func:`afl_minimax` (an :class:`AFLMinimax`), IFCA's :func:`ifca_fixed_point` (an
  :class:`IFCAFixedPoint`), FedRep's and FedPer's :func:`body_head_fixed_point`.

Example:
  >>> import jax, fedjax_abc as fa
  >>> fa.theory.sampling_factor(16, 4)
  0.8
"""

from fedjax_abc._theory._abc import (
    ABCConstants,
    ABCSlack,
    OracleVariance,
    RelaxedGrowth,
    abc_constants,
    abc_slack,
    oracle_variance,
    relaxed_growth_sigma_sq,
)
from fedjax_abc._theory._bounds import (
    SamplingRegime,
    Theorem2LeadingTerms,
    remark3_nu,
    remark3_sampling_dominates,
    theorem2_bound,
    theorem2_leading_terms,
    theorem2_stepsize,
    theorem2_stepsize_limit,
)
from fedjax_abc._theory._comparison import table1_rate_abc, table1_rate_bgd, yang2021_sampling_term
from fedjax_abc._theory._check import theorem2_check, theorem3_check
from fedjax_abc._theory._counterexample import Theorem1Values, theorem1_values, theorem1_x_k
from fedjax_abc._theory._learning import (
    Smoothness,
    run_points,
    smoothness_bound,
    smoothness_estimate,
    trajectory_points,
)
from fedjax_abc._theory._heterogeneity import (
    BGDSum,
    InfimaCheck,
    Lemma1Slack,
    bgd_sum,
    gradient_dissimilarity,
    infima_check,
    lemma1_slack,
    sampling_factor,
    sigma_f_star,
)
from fedjax_abc._theory._lemmas import (
    Estimate,
    LemmaCheck,
    LemmaConstants,
    LemmaDiagnostics,
    RoundSample,
    lemma4_terms,
    lemma5_terms,
    lemma6_terms,
    lemma7_terms,
    lemma8_terms,
    lemma_diagnostics,
    lemma_stepsize_limits,
    round_sample,
)
from fedjax_abc._theory._compression import (
    CompressedABC,
    compressed_abc,
    compression_error,
    compressor_delta,
    compressor_omega,
)
from fedjax_abc._theory._fairness import (
    AFLMinimax,
    IFCAFixedPoint,
    afl_minimax,
    body_head_fixed_point,
    ifca_fixed_point,
    qffl_two_clients,
)
from fedjax_abc._theory._gossip import (
    DSGDIterations,
    DSGDTerms,
    consensus_bound,
    consensus_error,
    dsgd_bound_terms,
    dsgd_iterations,
    expected_matching_contraction,
    mixing_matrix,
    mixing_parameter,
    second_eigenvalue,
    spectral_gap,
)
from fedjax_abc._theory._personal import (
    PersonalFixedPoint,
    apfl_fixed_point,
    apfl_personal,
    ditto_fixed_point,
    ditto_personal,
    fedavg_fixed_point,
    fine_tuned_personal,
    moreau_curvature,
    perfedavg_curvature,
    perfedavg_first_order_bias,
    perfedavg_fixed_point,
    perfedavg_personal,
    pfedme_curvature,
    pfedme_fixed_point,
    pfedme_personal,
    quadratic_fixed_point,
)
from fedjax_abc._theory._privacy import dp_epsilon, dp_event, dp_noise_multiplier
from fedjax_abc._theory._participation import (
    Inclusion,
    SamplingError,
    WeightMoments,
    inclusion_probabilities,
    monte_carlo_moments,
    sampling_error,
    stationary_availability,
    weight_moments,
)
from fedjax_abc._theory._robust import (
    Robustness,
    breakdown_fraction,
    ipm_contraction,
    median_bias_at_infinity,
    order_statistic_mean,
    robustness,
    trimmed_mean_bias_at_infinity,
)
from fedjax_abc._theory._time import exponential_staleness
from fedjax_abc._theory._theorem3 import (
    Theorem3ScheduleCheck,
    check_theorem3_schedule,
    diminishing_stepsize,
    theorem3_stepsize_limit,
)

__all__ = [
    "AFLMinimax",
    "IFCAFixedPoint",
    "afl_minimax",
    "body_head_fixed_point",
    "ifca_fixed_point",
    "qffl_two_clients",
    "PersonalFixedPoint",
    "apfl_fixed_point",
    "apfl_personal",
    "ditto_fixed_point",
    "ditto_personal",
    "fedavg_fixed_point",
    "fine_tuned_personal",
    "quadratic_fixed_point",
    "moreau_curvature",
    "perfedavg_curvature",
    "perfedavg_first_order_bias",
    "perfedavg_fixed_point",
    "perfedavg_personal",
    "pfedme_curvature",
    "pfedme_fixed_point",
    "pfedme_personal",
    "DSGDIterations",
    "DSGDTerms",
    "consensus_bound",
    "consensus_error",
    "dsgd_bound_terms",
    "dsgd_iterations",
    "expected_matching_contraction",
    "mixing_matrix",
    "mixing_parameter",
    "second_eigenvalue",
    "spectral_gap",
    "Robustness",
    "breakdown_fraction",
    "ipm_contraction",
    "median_bias_at_infinity",
    "order_statistic_mean",
    "robustness",
    "trimmed_mean_bias_at_infinity",
    "dp_epsilon",
    "dp_event",
    "dp_noise_multiplier",
    "CompressedABC",
    "compressed_abc",
    "compression_error",
    "compressor_delta",
    "compressor_omega",
    "weight_moments",
    "stationary_availability",
    "sampling_error",
    "inclusion_probabilities",
    "exponential_staleness",
    "monte_carlo_moments",
    "WeightMoments",
    "SamplingError",
    "Inclusion",
    "ABCConstants",
    "ABCSlack",
    "BGDSum",
    "Estimate",
    "InfimaCheck",
    "LemmaCheck",
    "LemmaConstants",
    "LemmaDiagnostics",
    "Lemma1Slack",
    "OracleVariance",
    "RelaxedGrowth",
    "RoundSample",
    "SamplingRegime",
    "Smoothness",
    "Theorem1Values",
    "Theorem2LeadingTerms",
    "Theorem3ScheduleCheck",
    "abc_constants",
    "abc_slack",
    "bgd_sum",
    "check_theorem3_schedule",
    "diminishing_stepsize",
    "gradient_dissimilarity",
    "infima_check",
    "lemma1_slack",
    "lemma4_terms",
    "lemma5_terms",
    "lemma6_terms",
    "lemma7_terms",
    "lemma8_terms",
    "lemma_diagnostics",
    "lemma_stepsize_limits",
    "oracle_variance",
    "relaxed_growth_sigma_sq",
    "remark3_nu",
    "remark3_sampling_dominates",
    "round_sample",
    "run_points",
    "sampling_factor",
    "sigma_f_star",
    "smoothness_bound",
    "smoothness_estimate",
    "theorem1_values",
    "theorem1_x_k",
    "theorem2_bound",
    "theorem2_check",
    "theorem2_leading_terms",
    "theorem2_stepsize",
    "theorem2_stepsize_limit",
    "theorem3_check",
    "theorem3_stepsize_limit",
    "table1_rate_abc",
    "table1_rate_bgd",
    "yang2021_sampling_term",
    "trajectory_points",
]
