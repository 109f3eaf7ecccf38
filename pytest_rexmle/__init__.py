"""pytest-rexmle: the ReX-MLE medical-imaging agent benchmark as a pytest plugin.

The flow a reader should follow through the package:
task (``task.py``) -> data (``data/``) -> runtime + agent (``runtime/``, ``agents/``) ->
submission (``submission.py``) -> grader (``graders/``) -> ranking (``ranking.py``) -> report (``report/``).
"""

__version__ = "0.1.0"
