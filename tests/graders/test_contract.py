"""The grader contract, for every registered task: one suite instead of one copy per grader file.

For each task's seeded synthetic twin: the baseline (public data only) is valid, scores below perfect
and its metrics match a stored snapshot; the answers written as a submission score every metric's best
value and top every ranking; and each class of malformed submission that applies to the task's format
is refused with a reason that names the problem, by the grader (INVALID, or MISSING for an absent CSV)
and by the agent-side validation from public data alone. The per-grader
files keep what is specific to one challenge (hand examples, degradations, format details).
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from pytest_rexmle.data.synthetic import ensure_synthetic
from pytest_rexmle.errors import InvalidSubmission
from pytest_rexmle.graders.base import PREDICTION_FORMATS, load_grader
from pytest_rexmle.medimage.header_notes import collecting
from pytest_rexmle.scoring.grading import INVALID, MISSING, grade_submission, result_from_grade
from pytest_rexmle.scoring.result import TaskResult
from pytest_rexmle.task import Task, registry

from . import editing

TASKS = [t.id for t in registry()]
#: the twins' seed: snapshots of the baseline metrics hold for exactly these answers
SEED = 2024
#: a metric's best value where it is not 1 (higher is better) or 0 (lower is better)
BEST = {("ldct-iqa", "score"): 3.0,  # |PLCC| + |SROCC| + |KROCC|
        ("usenhance", "psnr"): math.inf}  # identical images: no noise at all
VOLUME_SUFFIXES = (".nii.gz", ".mha", ".seg.nrrd")
TIFF_SUFFIXES = (".tif", ".tiff")


@dataclass(frozen=True)
class Twin:
    task: Task
    public: Path
    private: Path
    perfect: Path
    baseline: Path

    @property
    def kind(self) -> str:
        """The prediction format of the twin's own files: 'number' (CSV cells), 'volume', 'tiff', 'png' or 'json'."""
        if not any(c.endswith(("_path", "_json")) for c in load_grader(self.task).prediction_columns):
            return "number"
        name = editing.first_file(self.perfect).name
        for kind, suffixes in (("volume", VOLUME_SUFFIXES), ("tiff", TIFF_SUFFIXES), ("png", (".png",)),
                               ("json", (".json",))):
            if name.endswith(suffixes):
                return kind
        raise AssertionError(f"{self.task.id}: unknown prediction format {name}")


@pytest.fixture(scope="module", params=TASKS)
def twin(request, shared_cache, tmp_path_factory) -> Twin:
    task = registry().get(request.param)
    assert task.implemented, f"{task.id} has no grader/generator: every challenge must be gradable"
    data = ensure_synthetic(task, shared_cache, seed=SEED)
    grader, out = load_grader(task), tmp_path_factory.mktemp(task.id)
    grader.write_perfect(data.private, out / "perfect")
    grader.write_baseline(data.public, out / "baseline")
    return Twin(task, data.public, data.private, out / "perfect", out / "baseline")


def rounded(metrics: dict[str, float]) -> dict[str, float]:
    """Ten significant digits: stable across platforms' last-bit differences, still sharp."""
    return {key: float(f"{float(value):.10g}") for key, value in sorted(metrics.items())}


def test_baseline_is_valid_not_perfect_and_as_recorded(twin, snapshot):
    load_grader(twin.task).validate(twin.baseline, twin.public)  # the public-only check passes
    outcome = grade_submission(twin.task, twin.baseline, twin.private)
    result = result_from_grade(twin.task, outcome)
    assert result.status == "ok", result.reason
    assert result.percentile < 1.0
    assert rounded(outcome.metrics) == snapshot


def test_perfect_submission_scores_every_best_value(twin):
    load_grader(twin.task).validate(twin.perfect, twin.public)
    outcome = grade_submission(twin.task, twin.perfect, twin.private)
    result = result_from_grade(twin.task, outcome)
    assert result.status == "ok", result.reason
    for metric in twin.task.metrics:
        best = BEST.get((twin.task.id, metric.key), 1.0 if metric.higher_is_better else 0.0)
        assert outcome.metrics[metric.key] == pytest.approx(best, abs=1e-12), metric.key
    assert result.positions == {m.key: 1 for m in twin.task.ranking_metrics}
    assert result.percentile == 1.0


# -- malformed submissions: each edit makes a copy of the perfect submission unacceptable ---------------

def rewrite_volume(change: Callable[[np.ndarray, sitk.Image], sitk.Image]) -> Callable[[Path], None]:
    """An edit replacing the first predicted volume by ``change(array, original image)``."""
    def edit(sub: Path) -> None:
        path = editing.first_file(sub)
        image = sitk.ReadImage(str(path))
        sitk.WriteImage(change(sitk.GetArrayFromImage(image), image), str(path))
    return edit


def on_grid(array: np.ndarray, like: sitk.Image) -> sitk.Image:
    image = sitk.GetImageFromArray(array)
    image.CopyInformation(like)
    return image


def one_slice_less(array: np.ndarray, image: sitk.Image) -> sitk.Image:
    out = sitk.GetImageFromArray(array[:-1])
    out.SetSpacing(image.GetSpacing())
    out.SetOrigin(image.GetOrigin())
    out.SetDirection(image.GetDirection())
    return out


def with_value(value: float, dtype=np.float32) -> Callable[[np.ndarray, sitk.Image], sitk.Image]:
    """The volume with its middle voxel set to ``value``, stored as ``dtype``."""
    def change(array: np.ndarray, image: sitk.Image) -> sitk.Image:
        out = array.astype(dtype)
        out.flat[out.size // 2] = value
        return on_grid(out, image)
    return change


def rewrite_tiff(change: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
    def edit(sub: Path) -> None:
        import tifffile

        path = editing.first_file(sub)
        tifffile.imwrite(path, change(tifffile.imread(path)))
    return edit


def rewrite_png(change: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
    def edit(sub: Path) -> None:
        from PIL import Image

        path = editing.first_file(sub)
        with Image.open(path) as image:
            array = np.asarray(image)
        Image.fromarray(change(array)).save(path)
    return edit


def with_nan(array: np.ndarray) -> np.ndarray:
    out = array.astype(np.float32)
    out.flat[out.size // 2] = np.nan
    return out


def write_first(content: bytes) -> Callable[[Path], None]:
    def edit(sub: Path) -> None:
        editing.first_file(sub).write_bytes(content)
    return edit


def write_csv(content: bytes) -> Callable[[Path], None]:
    def edit(sub: Path) -> None:
        (sub / "submission.csv").write_bytes(content)
    return edit


def header_only(sub: Path) -> None:
    (sub / "submission.csv").write_text(",".join(editing.header(sub)) + "\n")


def stray_symlink(sub: Path) -> None:
    os.symlink(sub / "submission.csv", sub / "notes.txt")


def stray_fifo(sub: Path) -> None:
    os.mkfifo(sub / "pipe")


@dataclass(frozen=True)
class Malformed:
    edit: Callable[[Path], None]
    #: the formats it applies to (None: every task)
    kinds: tuple[str, ...] | None
    #: what the reason must say (a regular expression, case-insensitive)
    reason: str
    status: str = INVALID
    #: tasks whose organisers accept it by design (said where they are listed)
    exempt: tuple[str, ...] = ()


FILES = ("volume", "tiff", "png", "json")
MALFORMED = {
    "missing submission.csv": Malformed(lambda sub: (sub / "submission.csv").unlink(), None, "submission.csv",
                                        MISSING),
    "empty CSV": Malformed(write_csv(b""), None, "empty"),
    "header-only CSV": Malformed(header_only, None, "missing test case"),
    "CSV not UTF-8": Malformed(write_csv(b"\xff\xfe\x00i\x00d"), None, "UTF-8|NUL"),
    "missing id": Malformed(editing.drop_row, None, "missing test case"),
    "unknown id": Malformed(editing.extra_row("not-a-case"), None, "unknown case"),
    "duplicated id": Malformed(editing.duplicate_row, None, "duplicated id"),
    "stray symbolic link": Malformed(stray_symlink, None, "symbolic link"),
    "stray FIFO": Malformed(stray_fifo, None, "fifo|pipe|not a regular"),
    "NaN score": Malformed(editing.set_first_path("nan"), ("number",), "finite"),
    "infinite score": Malformed(editing.set_first_path("-inf"), ("number",), "finite"),
    "text score": Malformed(editing.set_first_path("high"), ("number",), "not a number"),
    "missing file": Malformed(lambda sub: editing.first_file(sub).unlink(), FILES, "does not exist"),
    "path leaving the folder": Malformed(editing.set_first_path("../outside.bin"), FILES, "leaves"),
    "absolute path": Malformed(editing.set_first_path("/etc/passwd"), FILES, "relative"),
    "symlinked prediction": Malformed(editing.symlink_first, FILES, "symbolic link"),
    "undecodable file": Malformed(write_first(b"\x00garbage, not a prediction\xff" * 4), FILES,
                                  r"case '[^']+'.*(cannot|not valid)"),
    "wrong shape": Malformed(rewrite_volume(one_slice_less), ("volume",), "size|shape|grid|geometry"),
    "NaN voxel": Malformed(rewrite_volume(with_value(np.nan)), ("volume",), "finite|nan|label|value"),
    # SEG.A and ISLES'22 count any nonzero voxel as foreground, floats included, so 0.5
    # is a valid (vessel, lesion) value there
    "fractional label": Malformed(rewrite_volume(with_value(0.5)), ("volume",), "integ|label|value",
                                  exempt=("seg-a", "isles22")),
    # ISLES'22 and SEG.A read any nonzero voxel as foreground (lesion, vessel), as their organisers do
    "label out of range": Malformed(rewrite_volume(with_value(200, np.int16)), ("volume",), "label|value",
                                    exempt=("isles22", "seg-a")),
    "negative label": Malformed(rewrite_tiff(lambda a: a.astype(np.int16) - 1), ("tiff",), "negative|label|value"),
    "NaN pixel": Malformed(rewrite_tiff(with_nan), ("tiff",), "finite|nan|label|value|integ"),
    # PUMA's tissue masks of any size are resized to 1024×1024 (nearest), as the organisers do
    "cropped image": Malformed(rewrite_tiff(lambda a: a[:-1]), ("tiff",), "size|shape",
                               exempt=("puma-t1-tissue-seg", "puma-t2-tissue-seg")),
    "cropped PNG": Malformed(rewrite_png(lambda a: a[:-1]), ("png",), "size|shape"),
    "JSON of the wrong type": Malformed(write_first(b'"a string"'), ("json",), r"case '[^']+'.*must"),
}


def declared_format(task_id: str) -> str | None:
    """The prediction format the task's grader declares (``prediction_format``), None where it declares none."""
    return getattr(load_grader(registry().get(task_id)), "prediction_format", None)


#: each task's prediction format, as its competition's grader declares it, so only the classes that apply
#: are collected (checked against the twins themselves by ``test_prediction_formats_are_as_declared``)
KINDS = {task: declared_format(task) for task in TASKS}
APPLICABLE = [pytest.param(task, name, id=f"{task}-{name}") for task in TASKS for name, m in MALFORMED.items()
              if m.kinds is None or KINDS[task] in m.kinds]


@pytest.mark.parametrize("task_id", TASKS)
def test_every_grader_declares_its_prediction_format(task_id):
    assert KINDS[task_id] in PREDICTION_FORMATS, (
        f"{task_id}: its grader class must set prediction_format to one of {PREDICTION_FORMATS}, "
        f"not {KINDS[task_id]!r}")


def test_prediction_formats_are_as_declared(twin):
    assert twin.kind == KINDS[twin.task.id], f"{twin.task.id}: the grader's prediction_format is not its files'"


# -- a header unlike the ground truth's on the ground truth's shape: scored, with a warning --
# (docs/reference/grading.md: reading images)

def header_edit(change: Callable[[sitk.Image], None]) -> Callable[[np.ndarray, sitk.Image], sitk.Image]:
    def edit(array: np.ndarray, image: sitk.Image) -> sitk.Image:
        out = on_grid(array, image)
        change(out)
        return out
    return edit


def _shift_origin(img: sitk.Image) -> None:
    img.SetOrigin(tuple(o + d for o, d in zip(img.GetOrigin(), (0.2, 0.0, 0.0), strict=True)))


def _spacing_061(img: sitk.Image) -> None:
    """The first spacing scaled by 0.61/0.6 (0.6 mm would be written 0.61 mm)."""
    sx, *rest = img.GetSpacing()
    img.SetSpacing((sx * 0.61 / 0.6, *rest))


def _ras_direction(img: sitk.Image) -> None:
    """The direction a RAS-minded writer stores (x and y negated), voxels untouched."""
    d = np.asarray(img.GetDirection(), float).reshape(3, 3)
    img.SetDirection(tuple((d @ np.diag([-1.0, -1.0, 1.0])).ravel()))


HEADER_EDITS = {"origin offset 0.2 mm": (_shift_origin, "origin"), "spacing 0.61 vs 0.6": (_spacing_061, "spacing"),
                "RAS-stored direction": (_ras_direction, "direction")}
VOLUME_TASKS = [task for task in TASKS if KINDS[task] == "volume"]
HEADER_CASES = [pytest.param(task, name, id=f"{task}-{name}") for task in VOLUME_TASKS for name in HEADER_EDITS]


@pytest.mark.parametrize("twin, name", HEADER_CASES, indirect=["twin"])
def test_a_header_difference_is_scored_on_the_ground_truth_grid_with_a_warning(name, twin, tmp_path):
    change, prop = HEADER_EDITS[name]
    sub = editing.copy_of(twin.perfect, tmp_path / "submission")
    rewrite_volume(header_edit(change))(sub)
    outcome = grade_submission(twin.task, sub, twin.private)
    assert outcome.status == "ok", outcome.reason
    perfect = grade_submission(twin.task, twin.perfect, twin.private)
    assert outcome.metrics == perfect.metrics                # the voxels, index for index, on the truth's grid
    assert perfect.warnings == ()
    case_id = editing.rows(sub)[0][editing.header(sub)[0]]
    assert len(outcome.warnings) == 1 and f"case {case_id!r}: prediction header {prop}" in outcome.warnings[0]
    result = result_from_grade(twin.task, outcome)
    assert result.warnings == list(outcome.warnings) and result.percentile == 1.0
    assert TaskResult.from_json(result.to_json()).warnings == result.warnings   # kept in result.json
    with collecting() as notes:                              # the agent-side check accepts it and says why
        load_grader(twin.task).validate(sub, twin.public)
    assert [n for n in notes.messages() if prop in n], notes.messages()


@pytest.mark.parametrize("twin", VOLUME_TASKS, indirect=True)
def test_another_shape_stays_invalid_even_with_a_matching_header(twin, tmp_path):
    sub = editing.copy_of(twin.perfect, tmp_path / "submission")
    rewrite_volume(one_slice_less)(sub)
    outcome = grade_submission(twin.task, sub, twin.private)
    assert outcome.status == INVALID and re.search("size", outcome.reason or ""), outcome.reason


@pytest.mark.parametrize("twin, name", APPLICABLE, indirect=["twin"])
def test_malformed_submission_is_refused_with_a_reason(name, twin, tmp_path):
    malformed = MALFORMED[name]
    if twin.task.id in malformed.exempt:  # accepted by design: graded, not refused
        sub = editing.copy_of(twin.perfect, tmp_path / "submission")
        malformed.edit(sub)
        outcome = grade_submission(twin.task, sub, twin.private)
        assert outcome.status == "ok", (name, outcome.status, outcome.reason)
        return
    sub = editing.copy_of(twin.perfect, tmp_path / "submission")
    malformed.edit(sub)
    outcome = grade_submission(twin.task, sub, twin.private)
    assert outcome.status == malformed.status, (outcome.status, outcome.reason)
    assert outcome.reason and re.search(malformed.reason, outcome.reason, re.IGNORECASE), outcome.reason
    with pytest.raises(InvalidSubmission) as refused:  # the agent-side check, from public data only
        load_grader(twin.task).validate(sub, twin.public)
    assert re.search(malformed.reason, str(refused.value), re.IGNORECASE), str(refused.value)
    shutil.rmtree(sub, ignore_errors=True)
