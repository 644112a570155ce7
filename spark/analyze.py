"""kafkaproof analysis job: turn run directories into exact, explainable anomaly counts.

The entry file of ``spark-submit --py-files kafkaproof_analysis.zip spark/analyze.py <run_dir> [<run_dir> ...]``
(`kafkaproof.analysis` builds the zip and the command). The job is the package beside this file,
spark/kafkaproof_analysis/ (docs/analysis.md says what it computes). Without ``--py-files`` (run
from a checkout or an installed wheel on a local master) the package is found next to this file.
"""
from __future__ import annotations

import os
import sys

# The package beside this file is looked for last: the --py-files copy wins when spark-submit got one
# (it alone carries the fault families generated from kafkaproof's registry, so the job needs no kafkaproof);
# without one (a local master, from a checkout or the wheel) the package here is imported. A driver that
# got the entry file alone (--deploy-mode cluster) imports the --py-files copy.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE] + [_HERE]

from kafkaproof_analysis.job import main  # noqa: E402 - the path above first

if __name__ == "__main__":
    sys.exit(main())
