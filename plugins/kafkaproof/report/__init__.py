"""HTML reports: one page per scenario run, a page per batch (a night, a DAG run), an upgrade comparison, a
client matrix.

`kit.py` is the HTML kit, `svg.py` the charts, `data.py` the loading, `shaping.py` and
`verdict_text.py` pure shaping; one module per page kind. How to read them: docs/reports.md.
"""
from .batch_page import write_batch_report
from .clients_page import write_client_report
from .night_page import write_night_report
from .run_page import application_lead, write_run_report
from .upgrade_page import write_upgrade_report

__all__ = ["application_lead", "write_batch_report", "write_client_report", "write_night_report", "write_run_report",
           "write_upgrade_report"]
