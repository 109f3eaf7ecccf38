"""Scoring: a submission graded into an outcome (``grading``), placed against the human leaderboard
(``ranking``), recorded as a result (``result``), sealed (``seal``) and checked for suspected leaks (``leaks``).
"""
