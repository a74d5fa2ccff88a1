"""The paper's reproduction: Section IV's experiments, the report and the algorithm comparison.

- :mod:`~fedjax_abc.repro.paper`: every setting and printed number of Section IV.
- :mod:`~fedjax_abc.repro.fig1`, :mod:`~fedjax_abc.repro.table2`,
  :mod:`~fedjax_abc.repro.hypotheses`, :mod:`~fedjax_abc.repro.fig3`,
  :mod:`~fedjax_abc.repro.theorems`: the experiments behind ``fedjax-abc reproduce``.
- :mod:`~fedjax_abc.repro.report`: ``docs/reproduction.md`` from their JSON results, with a
  scorecard of the claims; :mod:`~fedjax_abc.repro.controls`: the negative controls of the
  theory checks (run by the lemmas experiment); :mod:`~fedjax_abc.repro.index`: every
  numbered object of the paper with its function, test and report section.
- :mod:`~fedjax_abc.repro.tuned`: ``fedjax-abc compare``; :mod:`~fedjax_abc.repro.compare`,
  :mod:`~fedjax_abc.repro.participation`, :mod:`~fedjax_abc.repro.tradeoffs`: its
  ``--fixed``, ``--participation`` and ``--tradeoffs``; :mod:`~fedjax_abc.repro.grid`:
  ``fedjax-abc run GRID.toml``.
"""
