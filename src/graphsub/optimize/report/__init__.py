"""Self-contained HTML reports of ``graphsub optimize`` runs (see :mod:`graphsub.optimize.report.render`).

matplotlib is imported only when a chart is drawn, so importing this package is cheap.
"""

from graphsub.optimize.report.render import MAX_PICTURES, render_report, write_report

__all__ = ["MAX_PICTURES", "render_report", "write_report"]
