"""pytest-rexmle: the ReX-MLE medical-imaging agent benchmark as a pytest plugin.

The flow a reader should follow through the package:
task (``task.py``, ``tasks/<id>/``) -> data (``data/``; per competition ``challenges/<challenge>/``) ->
runtime + agent (``runtime/``, ``agents/``) -> submission (``submission.py``) -> grader
(``challenges/<challenge>/grade.py`` on ``graders/``) -> ranking (``ranking.py``) -> report (``report/``).
"""

__version__ = "0.1.0"
