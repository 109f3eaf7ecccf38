"""The Circle of Willis as TopCoW labels it: label ids, the anterior and posterior
labels, the names of the eight graph edges.

Plain constants, kept apart from the topology computations (NumPy, scikit-image) so that reading or
writing an edge or box JSON (the sample agent, ``rexmle validate``) imports nothing heavy.
"""

from __future__ import annotations

BA, R_PCA, L_PCA, R_ICA, R_MCA, L_ICA, L_MCA, R_PCOM, L_PCOM, ACOM, R_ACA, L_ACA, THIRD_A2 = \
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15
#: every value a TopCoW label volume may hold (0 is background)
COW_LABELS = frozenset({0, BA, R_PCA, L_PCA, R_ICA, R_MCA, L_ICA, L_MCA, R_PCOM, L_PCOM, ACOM, R_ACA, L_ACA, THIRD_A2})
ANTERIOR_LABELS = (ACOM, R_ACA, L_ACA, THIRD_A2)
POSTERIOR_LABELS = (R_PCA, L_PCA, R_PCOM, L_PCOM)
ANTERIOR_EDGES = ("L-A1", "Acom", "3rd-A2", "R-A1")
POSTERIOR_EDGES = ("L-Pcom", "L-P1", "R-P1", "R-Pcom")
