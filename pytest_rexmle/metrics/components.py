"""Connected components and lesion-wise detection (ISLES'22 style)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .compiled import load_extension


def label_components(mask: np.ndarray) -> tuple[np.ndarray, int]:
    """Component labels with full connectivity (26 in 3-D), numbered as ``scipy.ndimage.label`` numbers
    them: its compiled kernel, loaded without importing ``scipy.ndimage`` (:mod:`.compiled`), or the
    public function where that kernel cannot be used."""
    mask = np.asarray(mask) != 0
    kernel = _label_kernel()
    if kernel is not None and mask.size:
        try:
            return kernel(mask)
        except Exception:  # e.g. more components than int32 labels: the public function widens
            pass
    from scipy import ndimage  # start-up: scipy only where this runs

    labels, n = ndimage.label(mask, structure=np.ones((3,) * mask.ndim, dtype=bool))
    return labels, int(n)


def count_components(mask: np.ndarray) -> int:
    """Number of fully connected components (0 for an empty mask)."""
    return label_components(mask)[1] if np.any(mask) else 0


@functools.cache
def _label_kernel() -> Callable[[np.ndarray], tuple[np.ndarray, int]] | None:
    """SciPy's compiled labelling (three times faster than SimpleITK's filter here, which also holds the
    GIL the per-label threads share), checked on a probe; None when anything is unexpected."""
    try:
        label = load_extension("scipy.ndimage._ni_label")._label

        def run(mask: np.ndarray) -> tuple[np.ndarray, int]:
            out = np.empty(mask.shape, np.int32)
            n = label(np.ascontiguousarray(mask, dtype=bool), np.ones((3,) * mask.ndim, dtype=bool), out)
            return out, int(n)

        probe = np.zeros((3, 4, 5), dtype=bool)
        probe[0, 0, 0] = probe[1, 1, 1] = True   # corner neighbours: one component
        probe[2, 3, 4] = True                    # two voxels away: a second one
        labels, n = run(probe)
        if n != 2 or labels[0, 0, 0] != 1 or labels[2, 3, 4] != 2:
            raise ImportError("the compiled labelling does not behave as expected")
        return run
    except Exception:
        return None


def lesion_detection(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Lesion-wise F1 and component-count difference.

    A ground-truth component touching the prediction is a TP (else FN); a predicted component touching
    no ground truth is an FP. F1 = TP / (TP + (FP + FN) / 2), and 1.0 when nothing is there at all.
    """
    g_labels, n_g = label_components(truth)
    p_labels, n_p = label_components(pred)
    tp = len(np.unique(g_labels[(g_labels > 0) & pred]))
    fn = n_g - tp
    fp = n_p - len(np.unique(p_labels[(p_labels > 0) & truth]))
    f1 = 1.0 if tp + fp + fn == 0 else tp / (tp + (fp + fn) / 2.0)
    return {"lesion_f1": f1, "lesion_count_diff": float(abs(n_g - n_p)), "tp": tp, "fp": fp, "fn": fn}
