"""What the experiment binaries share: how a run is executed and reported.

The TFF execution context and its worker processes (`runtime`), TensorFlow
imported quietly (`quiet`), the binaries' flag checks, one-line errors and
`--help` (`cli`, `errors`), resumable round loops and multi-setting runs
(`round_loop`, `experiment`), atomic result files (`results_io`), calls in an
isolated process (`isolated`), and the reports of the studies (`frontier`,
`fl_table`, `comparisons`).

Importing this package imports none of its modules (several import TensorFlow
or TFF): import the module you use, e.g. `from tff_quant.program import runtime`.
"""
