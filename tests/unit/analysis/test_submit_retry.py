"""`analyze_locations` against a stand-in spark-submit: a driver JVM that ends under the job (Spark's exit 50)
is submitted once more; the job's own failures (1, 2) are not, and a second driver death is reported."""
from __future__ import annotations

from pathlib import Path

import pytest

from kafkaproof.analysis import submit
from kafkaproof.errors import AnalysisError

pytestmark = pytest.mark.unit


def fake_spark_submit(tmp_path: Path, codes: list[int]) -> tuple[Path, Path]:
    """A script that exits with `codes[i]` on its i-th call, printing what a dying driver prints; the count file."""
    count = tmp_path / "calls"
    script = tmp_path / "spark-submit"
    script.write_text(f"""#!/bin/sh
n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}
set -- {' '.join(map(str, codes))}
shift $((n - 1)); code=$1
if [ "$code" = 50 ]; then
  echo "26/11/28 21:40:00 ERROR SparkUncaughtExceptionHandler: Uncaught exception in thread Thread[Executor task launch worker,5,main]"
  echo "java.lang.StackOverflowError"
fi
exit $code
""")
    script.chmod(0o755)
    return script, count


@pytest.mark.parametrize("codes, calls, fails", [
    ([50, 0], 2, False),   # the driver died once: the second submit's result counts
    ([50, 50], 2, True),   # twice: reported, with the JVM's own line
    ([1], 1, True),        # an analysis failed: the job's verdict, not retried
    ([2], 1, True),        # bad input: not retried
    ([0], 1, False),
])
def test_a_driver_that_dies_under_the_job_is_submitted_once_more(tmp_path, codes, calls, fails):
    script, count = fake_spark_submit(tmp_path, codes)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if fails:
        with pytest.raises(AnalysisError) as err:
            submit.analyze_locations([run_dir], spark_submit=str(script), quiet=True)
        if codes[-1] == 50:
            assert "Uncaught exception in thread" in str(err.value).split("last output")[0]
    else:
        submit.analyze_locations([run_dir], spark_submit=str(script), quiet=True)
    assert int(count.read_text()) == calls
