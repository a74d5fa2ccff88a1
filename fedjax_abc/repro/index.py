"""Every numbered object of the paper: where it is implemented, tested and shown in the report.

"On Federated Averaging with Partial Participation under a General Variance Condition"
(Wang, Huang, Johansson, Pu) numbers equations (1)-(49), Definition 1, Assumptions 1-3,
Lemmas 1-10, Remarks 1-4, Theorems 1-3, Algorithm 1, Figs. 1-3 and Tables I-II.
:data:`OBJECTS` lists them in the order the paper states them (an equation after the lemma,
assumption or theorem that states it). Not listed: section numbers, footnote 1 and the
labelled conditions (P.1)-(P.4') inside Lemma 10.

Each :class:`PaperObject` names the public function or class that implements the object (a
dotted path; :func:`resolve` imports it), the test that checks it (``tests/<file>.py::<test>``),
the section of ``docs/reproduction.md`` that shows it (a key of :data:`SECTIONS`) and one
of the status words:

- :data:`CHECKED` ("checked"): implemented, tested and shown in the report;
- :data:`IMPLEMENTED` ("implemented"): a public function and a test, not in the report;
- :data:`TESTED` ("tested"): a test checks it, but no public function implements it on its
  own (a property of the simulator, or a step of a proof that a test re-derives);
- :data:`DEFINITION` ("definition"): notation only, nothing to compute or check;
- :data:`EXTERNAL` ("external result"): a theorem of another paper that a proof cites
  (Lemma 10), nothing of this paper to compute or check;
- :data:`PROOF_STEP` ("proof step, not checked"): a step of a proof that no test checks;
- :data:`NOT_CHECKED` ("not checked"): a statement that nothing here implements or checks.

:func:`index_lines` renders the index as a section of Markdown for the report.

Example:
  >>> from fedjax_abc.repro import index
  >>> obj = index.find("equation", "11")
  >>> obj.label, obj.implementation, obj.status
  ('eq. (11)', 'fedjax_abc.theory.sigma_f_star', 'checked')
"""

from __future__ import annotations

import collections
import importlib
from typing import NamedTuple, Optional, final

CHECKED = "checked"
IMPLEMENTED = "implemented"
TESTED = "tested"
DEFINITION = "definition"
EXTERNAL = "external result"
PROOF_STEP = "proof step, not checked"
NOT_CHECKED = "not checked"
STATUSES = (CHECKED, IMPLEMENTED, TESTED, DEFINITION, EXTERNAL, PROOF_STEP, NOT_CHECKED)

LEGEND = {
    CHECKED: "a public function implements it, a test checks it and a section of this report "
             "shows it",
    IMPLEMENTED: "a public function and a test, not shown in this report",
    TESTED: "a test checks it, but no public function implements it on its own (a property "
            "of the simulator, or a proof step that a test re-derives)",
    DEFINITION: "notation only, nothing to compute",
    EXTERNAL: "a theorem of another paper that a proof cites, nothing of this paper to check",
    PROOF_STEP: "a step of a proof that no test checks",
    NOT_CHECKED: "a statement that nothing here implements or checks",
}

# Report sections: short name -> how its "## " heading in docs/reproduction.md begins.
SECTIONS = {
    "Fig. 1": "Fig. 1:",
    "Table II and Fig. 2": "Table II and Fig. 2:",
    "Table II hypotheses": "Table II: which single reading",
    "Fig. 3": "Fig. 3:",
    "Remark 4": "Remark 4",
    "Lemmas 4-8": "Lemmas 4-8:",
    "Theorem 1": "Theorem 1:",
    "Theorem 2": "Theorem 2:",
    "Theorem 3": "Theorem 3:",
}

KIND_NAMES = {"equation": "eq.", "definition": "Definition", "assumption": "Assumption",
              "lemma": "Lemma", "remark": "Remark", "theorem": "Theorem",
              "algorithm": "Algorithm", "figure": "Fig.", "table": "Table"}


@final
class PaperObject(NamedTuple):
    """One numbered object of the paper.

    Attributes:
      kind: a key of :data:`KIND_NAMES` ("equation", "lemma", "table", ...).
      number: as the paper prints it: "11", "I".
      what: what it is, in a few words.
      implementation: dotted public path of the function or class, or None.
      test: "tests/test_x.py::test_name" of the test that checks it, or None.
      section: the report section that shows it (a key of :data:`SECTIONS`), or None.
      status: one of :data:`STATUSES`.
    """

    kind: str
    number: str
    what: str
    implementation: Optional[str]
    test: Optional[str]
    section: Optional[str]
    status: str

    @property
    def label(self) -> str:
        """How the paper names it: "eq. (11)", "Lemma 3", "Table II"."""
        if self.kind == "equation":
            return f"eq. ({self.number})"
        return f"{KIND_NAMES[self.kind]} {self.number}"


def status_of(implementation: Optional[str], test: Optional[str], section: Optional[str]) -> str:
    """The status the three fields give (:data:`CHECKED`, :data:`IMPLEMENTED`, :data:`TESTED`).

    Raises:
      ValueError: with neither a test nor an implementation and test (give the status then).
    """
    if implementation and test:
        return CHECKED if section else IMPLEMENTED
    if test and not implementation:
        return TESTED
    raise ValueError(f"no status follows from implementation={implementation!r}, test={test!r}")


def _obj(kind, number, what, implementation=None, test=None, section=None, status=None):
    status = status or status_of(implementation, test, section)
    return PaperObject(kind, str(number), what, implementation, test, section, status)


def _eq(number, what, implementation=None, test=None, section=None, status=None):
    return _obj("equation", number, what, implementation, test, section, status)


def _step(number, what, test=None):
    """An equation inside a proof: a proof step, or "tested" where a test re-derives it."""
    return _eq(number, what, None, test, None, None if test else PROOF_STEP)


TH, PR, RE, FA = "fedjax_abc.theory.", "fedjax_abc.problems.", "fedjax_abc.repro.", "fedjax_abc."
HET, ABC = "tests/test_theory_heterogeneity.py::", "tests/test_theory_abc.py::"
BND, CHK = "tests/test_theory_bounds.py::", "tests/test_theory_check.py::"
LEM, DIAG = "tests/test_lemmas.py::", "tests/test_lemma_diagnostics.py::"
PROB, EXACT, CLI = "tests/test_problems.py::", "tests/test_exact.py::", "tests/test_cli.py::"
# The test of Lemmas 5-8 that can fail: each holds at its true constants and fails at a wrong
# one on a nearly tight case (the report's negative controls).
HOLD = "tests/test_negative_controls.py::test_lemma_correct_holds_and_wrong_fails"

OBJECTS: tuple[PaperObject, ...] = (
    _eq(1, "f = (1/n) sum_i f_i, the global objective", FA + "Problem.value",
        PROB + "test_quadratics_gradients_against_finite_differences"),
    _eq(2, "relaxed growth condition (sigma^2, eta^2)", TH + "relaxed_growth_sigma_sq",
        ABC + "test_relaxed_growth_fails_for_oracle26"),
    _eq(3, "BGD condition (zeta^2, psi^2)", TH + "bgd_sum",
        HET + "test_bgd_table2_range_and_domain_convention", "Table II and Fig. 2"),
    _eq(4, "ABC condition: variance <= C [f_i - f_i*] + D", TH + "abc_constants",
        ABC + "test_section_4b_oracle_recovers_C1_D0"),
    _obj("table", "I", "rates of FedAvg: this work against [10], [14], [19]-[21]",
         TH + "table1_rate_abc", "tests/test_theory_remark4.py::test_table1_rates_by_hand",
         "Remark 4"),
    _eq(5, "Q local SGD steps of client i from x_t", FA + "local_run",
        EXACT + "test_local_run_by_hand"),
    _eq(6, "server step x_{t+1} = x_t - alpha_t G_t, G_t over S_t", FA + "fedavg_round",
        EXACT + "test_partial_participation_one_round_is_a_subset_average"),
    _obj("algorithm", 1, "FedAvg with partial participation (every simulation)",
         FA + "algorithms.FedAvg", "tests/test_simulate_statistics.py::test_huber_offsets_matches_numpy",
         "Fig. 1"),
    _obj("assumption", 1, "each f_i L-smooth and lower bounded", TH + "smoothness_estimate",
         HET + "test_assumption1_on_the_paper_problems", "Lemmas 4-8"),
    _eq(7, "L-smoothness and f_i* = inf f_i > -inf", TH + "infima_check",
        HET + "test_stored_infima_are_consistent"),
    _obj("definition", 1, "filtrations F_t, F_t^l and E_t[.] = E[. | F_t]", status=DEFINITION),
    _obj("assumption", 2, "unbiased oracle, ABC variance, independent clients",
         FA + "AbstractOracle", PROB + "test_gaussian_oracle_moments"),
    _eq(8, "ABC condition along the virtual trajectories", TH + "abc_slack",
        ABC + "test_oracle26_recovers_C1_D_half"),
    _obj("remark", 1, "client average of (8) at x_t: C (f - f*) + C sigma_f* + D",
         TH + "abc_slack", ABC + "test_remark1_client_average_of_eq8", "Lemmas 4-8"),
    _obj("assumption", 3, "S_t: S of n clients uniformly without replacement",
         FA + "UniformWithoutReplacement", "tests/test_sampling.py::test_every_subset_equally_likely"),
    _eq(9, "P(i in S_t) = S/n, P(i, j in S_t) = S(S-1)/(n(n-1))", FA + "sample_mask",
        "tests/test_sampling.py::test_uniform_without_replacement_eq9"),
    _eq(10, "I_S = (n - S)/(n - 1), the client sampling factor", TH + "sampling_factor",
        HET + "test_sampling_factor_values_and_validation", "Fig. 3"),
    _eq(11, "sigma_f* = f* - (1/n) sum_i f_i*, heterogeneity at the optimum", TH + "sigma_f_star",
        HET + "test_sigma_f_star_closed_form", "Table II and Fig. 2"),
    _obj("lemma", 1, "gradient dissimilarity bounded by f - f* and sigma_f*", TH + "lemma1_slack",
         HET + "test_lemma1_holds", "Lemmas 4-8"),
    _eq(12, "dissimilarity <= 2L (f - f*) + 2L sigma_f*", TH + "lemma1_slack",
        HET + "test_lemma1_holds", "Lemmas 4-8"),
    _obj("theorem", 1, "smooth, lower bounded clients that violate BGD (3)", TH + "theorem1_values",
         "tests/test_theory_theorem1.py::test_bgd_lhs_diverges_along_x_k", "Theorem 1"),
    _obj("lemma", 2, "conditional mean of G_t", None, LEM + "test_lemma2_sampled_direction_is_unbiased"),
    _eq(13, "E_t[G_t] = Q E_t[grad f-bar_t]", None, LEM + "test_lemma2_sampled_direction_is_unbiased"),
    _obj("lemma", 3, "client-sampling error of the accumulated gradients", TH + "sampling_error",
         LEM + "test_lemma3_unconditional"),
    _eq(14, "sampling error = (I_S / S) Psi_t", TH + "sampling_error",
        "tests/test_participation_exact.py::test_eq14_uniform_without_replacement"),
    _obj("lemma", 4, "one-step descent inequality", TH + "lemma4_terms",
         DIAG + "test_exact_case_in_closed_form", "Lemmas 4-8"),
    _eq(15, "E_t[f(x_{t+1})] - f* against gaps, Psi_t, drift, D", TH + "lemma4_terms",
        DIAG + "test_exact_case_in_closed_form", "Lemmas 4-8"),
    _obj("lemma", 5, "local objective gaps along the trajectories", TH + "lemma5_terms", HOLD,
         "Lemmas 4-8"),
    _eq(16, "sum of f_i(x~) - f_i* <= 2nQ (f - f* + sigma_f*) + L drift", TH + "lemma5_terms",
        HOLD, "Lemmas 4-8"),
    _obj("lemma", 6, "local drift", TH + "lemma6_terms", HOLD, "Lemmas 4-8"),
    _eq(17, "drift sum_i sum_l E_t||x_t - x~||^2 bounded", TH + "lemma6_terms", HOLD, "Lemmas 4-8"),
    _obj("lemma", 7, "trajectory gradient dissimilarity Psi_t", TH + "lemma7_terms", HOLD,
         "Lemmas 4-8"),
    _eq(18, "Psi_t <= drift + 4Q^2 L (f - f* + sigma_f*)", TH + "lemma7_terms", HOLD, "Lemmas 4-8"),
    _obj("lemma", 8, "approximate descent property", TH + "lemma8_terms", HOLD, "Lemmas 4-8"),
    _eq(19, "E_t[f(x_{t+1})] - f* <= (1 + a)(f - f*) - (aQ/4)||grad f||^2 + c",
        TH + "lemma8_terms", HOLD, "Lemmas 4-8"),
    _obj("theorem", 2, "finite-time bound at a constant stepsize", TH + "theorem2_check",
         CHK + "test_theorem2_bound_holds_small", "Theorem 2"),
    _eq(20, "the stepsize condition of Theorem 2", TH + "theorem2_stepsize_limit",
        BND + "test_stepsize_limit_closed_form", "Theorem 2"),
    _eq(21, "the bound on min_t E||grad f(x_t)||^2", TH + "theorem2_bound",
        BND + "test_bound21_is_lemma9_with_appendix_g_constants", "Theorem 2"),
    _eq(22, "the stepsize of Theorem 2", TH + "theorem2_stepsize",
        BND + "test_stepsize22_satisfies_constraint20", "Theorem 2"),
    _eq(23, "beta of the stepsize (22)", TH + "theorem2_stepsize",
        BND + "test_stepsize22_satisfies_constraint20", "Theorem 2"),
    _eq(24, "the rate: leading terms of (21) at (22)", TH + "theorem2_leading_terms",
        BND + "test_bound_at_stepsize22_within_46_47_and_24", "Theorem 2"),
    _obj("remark", 2, "S = n: no sampling terms, the full-participation rate",
         TH + "theorem2_leading_terms", BND + "test_full_participation_has_no_sampling_terms",
         "Remark 4"),
    _obj("remark", 3, "nu: where the sampling term of (24) dominates", TH + "remark3_nu",
         BND + "test_remark3_nu_matches_term_dominance", "Remark 4"),
    _obj("remark", 4, "the sampling term carries no Q, unlike [10]'s", TH + "yang2021_sampling_term",
         "tests/test_theory_remark4.py::test_yang2021_sampling_term_by_hand", "Remark 4"),
    _obj("theorem", 3, "diminishing stepsizes: grad f(x_t) -> 0 in mean and a.s.",
         TH + "check_theorem3_schedule",
         "tests/test_report_verdicts.py::test_thm3_schedules_against_theorem3", "Theorem 3"),
    _eq(25, "Section IV-A: one Huber and n - 1 softplus clients", PR + "softplus_huber",
        PROB + "test_softplus_huber_values_and_gradients", "Fig. 1"),
    _eq(26, "its Bernoulli-sign oracle (C = 1, D = 1/2)", PR + "softplus_huber",
        PROB + "test_oracle_26", "Fig. 1"),
    _obj("figure", 1, "f(x_t) - f* on (25) for S in {1, 4, 8, 16}", RE + "fig1.run",
         CLI + "test_fig1_schema", "Fig. 1"),
    _eq(27, "Section IV-B: Huber clients at random offsets d_i", PR + "huber_offsets",
        PROB + "test_huber_offsets_values_gradients_and_oracle", "Table II and Fig. 2"),
    _obj("table", "II", "BGD sum, sigma_f* and f(x_T) - f* on (27)", RE + "table2.run",
         CLI + "test_table2_schema", "Table II and Fig. 2"),
    _obj("figure", 2, "f(x_t) - f* on (27) per Dmax, one panel per S", RE + "table2.figure",
         "tests/test_report_figures.py::test_fig2_one_panel_per_S_one_curve_per_dmax",
         "Table II and Fig. 2"),
    _eq(28, "D_Q, the scaled residual of Fig. 3(b)", RE + "fig3.scaled_residual",
        CLI + "test_fig3_schema", "Fig. 3"),
    _obj("figure", 3, "R_S(Q) and D_Q against Q at fixed alpha Q", RE + "fig3.run",
         CLI + "test_fig3_schema", "Fig. 3"),
    _step(29, "proof of Lemma 2: E_t[G_t] as noise plus gradients"),
    _step(30, "proof of Lemma 4: descent by the L-smoothness of f"),
    _step(31, "proof of Lemma 4: the inner product, by Lemma 2"),
    _step(32, "proof of Lemma 4: E_t||G_t||^2 split in two"),
    _step(33, "proof of Lemma 4: the gradient part, by Lemma 3"),
    _step(34, "proof of Lemma 4: the noise part, by (8)"),
    _step(35, "proof of Lemma 6: the local recursion unrolled"),
    _step(36, "proof of Lemma 6: drift as noise plus gradients"),
    _step(37, "proof of Lemma 6: the accumulated noise, by (8)"),
    _step(38, "proof of Lemma 6: one client's drift at step l"),
    _step(39, "proof of Lemma 6: the drift summed, with Lemma 5"),
    _step(40, "proof of Lemma 6: grad f_i split in three"),
    _step(41, "proof of Lemma 6: the gradient norms, with Lemma 1"),
    _step(42, "proof of Lemma 6: the drift inequality rearranged"),
    _step(43, "proof of Lemma 7: the mean minimises the squared deviation"),
    _step(44, "proof of Lemma 8: Lemmas 5 and 7 in (15)"),
    _step(45, "proof of Lemma 8: (17) in (44)"),
    _obj("lemma", 9, "s_{t+1} <= (1 + a) s_t - b q_t + c bounds min_t q_t ([44])", None,
         BND + "test_bound21_is_lemma9_with_appendix_g_constants"),
    _step(46, "proof of Theorem 2: Delta_f / (alpha Q T) at (22)",
          BND + "test_bound_at_stepsize22_within_46_47_and_24"),
    _step(47, "proof of Theorem 2: alpha^2 Q^2 L^2 at (22)",
          BND + "test_bound_at_stepsize22_within_46_47_and_24"),
    _obj("lemma", 10, "convergence theorem of [45] under (P.1)-(P.4'), cited by Theorem 3's proof",
         status=EXTERNAL),
    _step(48, "proof of Theorem 3: (19) with constants K_1, K_2"),
    _step(49, "proof of Theorem 3: E_t||G_t||^2 <= K_3 + K_4 (f - f*)"),
)


def find(kind: str, number) -> PaperObject:
    """The object of this kind and number, e.g. ``find("lemma", 3)``, ``find("table", "II")``."""
    for obj in OBJECTS:
        if obj.kind == kind and obj.number == str(number):
            return obj
    raise KeyError(f"no {kind} {number} in the index")


def resolve(path: str):
    """What a dotted path names: the longest importable module prefix, then its attributes.

    Raises:
      ModuleNotFoundError: no prefix of the path is a module.
      AttributeError: the module lacks the rest of the path.
    """
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        name = ".".join(parts[:k])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is not None and not name.startswith(err.name):
                raise  # the module exists but one of its own imports is missing
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"no module in {path!r}")


def count_line(objects=OBJECTS) -> str:
    """One sentence: how many objects have each status."""
    c = collections.Counter(o.status for o in objects)
    return (f"{c[CHECKED]} of {len(objects)} numbered objects are checked, "
            f"{c[IMPLEMENTED]} implemented only, {c[TESTED]} tested only, "
            f"{c[DEFINITION]} notation only, {c[EXTERNAL]} external "
            f"result{'' if c[EXTERNAL] == 1 else 's'}, "
            f"{c[PROOF_STEP]} proof steps not checked and {c[NOT_CHECKED]} not checked.")


def _cell(text: Optional[str], code: bool = False) -> str:
    if not text:
        return "-"
    text = text.replace("|", "\\|")
    return f"`{text}`" if code else text


def index_lines(objects=OBJECTS) -> list[str]:
    """The index as Markdown lines: heading, legend, counts and one table row per object."""
    legend = "; ".join(f"*{word}*: {LEGEND[word]}" for word in STATUSES)
    lines = ["## Index of the paper's numbered objects", "",
             "Every numbered object of the paper in the order the paper states it, with the "
             "public function or class of `fedjax_abc` that implements it, the test that checks "
             f"it and the section of this report that shows it. Status: {legend}.", "",
             count_line(objects), "",
             "| object | what | implementation | test | report section | status |",
             "|---|---|---|---|---|---|"]
    for o in objects:
        lines.append(f"| {o.label} | {_cell(o.what)} | {_cell(o.implementation, True)} | "
                     f"{_cell(o.test, True)} | {_cell(o.section)} | {o.status} |")
    return lines
