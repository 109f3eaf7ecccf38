"""DENTEX twin: panoramic-like X-rays with hierarchically labelled tooth boxes.

Layout and conventions follow the fully labelled release: a COCO-style JSON with ``category_id_1``
(quadrant), ``category_id_2`` (tooth) and ``category_id_3`` (diagnosis), the three category lists with
the real names and **0-based** ids, numeric image ids that differ from the file stems (``train_0.png``
has id 1) and annotation ids starting at 0. Teeth sit in FDI order as seen on a panoramic image: the
patient's right (quadrants 1 and 4) on the image's left, tooth 1 next to the midline. Only abnormal
teeth are annotated, 2–5 per image, each with a visible finding.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from ...data.split import split_ids, write_split
from ...data.synthetic.common import write_csv, write_sample_submission
from ...task import Task

WIDTH, HEIGHT = 192, 96
N_IMAGES = 25  # -> 20 train / 5 test
TOOTH_W = 10   # pixels per tooth slot along the arch

CATEGORIES_1 = [{"id": i, "name": str(i + 1), "supercategory": "Quadrant"} for i in range(4)]
CATEGORIES_2 = [{"id": i, "name": str(i + 1), "supercategory": "Enumeration"} for i in range(8)]
CATEGORIES_3 = [{"id": 0, "name": "Impacted", "supercategory": "Diagnosis"},
                {"id": 1, "name": "Caries", "supercategory": "Diagnosis"},
                {"id": 2, "name": "Periapical Lesion", "supercategory": "Diagnosis"},
                {"id": 3, "name": "Deep Caries", "supercategory": "Diagnosis"}]


def tooth_box(quadrant: int, tooth: int, jitter: np.ndarray) -> tuple[int, int, int, int]:
    """(x, y, w, h) of a tooth; ``quadrant`` 0–3 and ``tooth`` 0–7 are the 0-based ids."""
    mid = WIDTH // 2
    left_side = quadrant in (0, 3)  # patient's right = image left
    x = mid - (tooth + 1) * TOOTH_W if left_side else mid + tooth * TOOTH_W
    upper = quadrant in (0, 1)
    curve = int(round(0.25 * tooth * tooth))  # the arch bends away from the occlusal plane
    h = 26 - tooth
    y = 46 - h - curve if upper else 50 + curve
    return int(x + 1 + jitter[0]), int(y + jitter[1]), TOOTH_W - 2, int(h)


def _render(boxes: list[tuple[tuple[int, int, int, int], int]], all_teeth, rng: np.random.Generator) -> np.ndarray:
    yy, xx = np.mgrid[:HEIGHT, :WIDTH]
    img = 40 + 30 * np.exp(-(((xx - WIDTH / 2) / 70.0) ** 2 + ((yy - HEIGHT / 2) / 35.0) ** 2))
    for x, y, w, h in all_teeth:
        img[y:y + h, x:x + w] = 175.0
    for (x, y, w, h), diagnosis in boxes:
        cx, cy = x + w // 2, y + h // 2
        if diagnosis == 0:    # impacted: tooth tilted into the bone -> brighter, displaced crown
            img[y:y + h, x:x + w] = 215.0
        elif diagnosis == 1:  # caries: small dark spot in the crown
            img[cy - 2:cy + 1, cx - 2:cx + 1] = 70.0
        elif diagnosis == 2:  # periapical lesion: dark halo at the root tip
            tip = y + h - 3 if y < HEIGHT // 2 else y
            img[tip:tip + 3, x:x + w] = 55.0
        else:                 # deep caries: large dark cavity
            img[cy - 3:cy + 3, cx - 3:cx + 3] = 60.0
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _case(index: int, rng: np.random.Generator, next_ann_id: int) -> tuple[dict, list[dict], np.ndarray]:
    image = {"id": index + 1, "file_name": f"train_{index}.png", "width": WIDTH, "height": HEIGHT}
    teeth = [(q, t) for q in range(4) for t in range(8)]
    jitters = {qt: rng.integers(-1, 2, size=2) for qt in teeth}
    present = [qt for qt in teeth if rng.random() > 0.08]
    n_abnormal = int(rng.integers(2, 6))
    chosen = [present[i] for i in rng.choice(len(present), n_abnormal, replace=False)]
    annotations, drawn = [], []
    for k, (q, t) in enumerate(chosen):
        x, y, w, h = tooth_box(q, t, jitters[(q, t)])
        diagnosis = int(rng.integers(0, 4))
        drawn.append(((x, y, w, h), diagnosis))
        annotations.append({
            "id": next_ann_id + k, "image_id": image["id"], "iscrowd": 0,
            "bbox": [x, y, w, h], "area": w * h,
            "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
            "category_id_1": q, "category_id_2": t, "category_id_3": diagnosis,
        })
    all_teeth = [tooth_box(q, t, jitters[(q, t)]) for q, t in present]
    return image, annotations, _render(drawn, all_teeth, rng)


def _coco(images: list[dict], annotations: list[dict]) -> dict:
    return {"images": images, "annotations": annotations, "categories_1": CATEGORIES_1,
            "categories_2": CATEGORIES_2, "categories_3": CATEGORIES_3}


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def generate(task: Task, public: Path, private: Path, rng: np.random.Generator) -> None:
    images, annotations, pixels = {}, {}, {}
    ann_id = 0
    for index in range(N_IMAGES):
        image, anns, array = _case(index, rng, ann_id)
        ann_id += len(anns)
        case_id = Path(image["file_name"]).stem
        images[case_id], annotations[case_id], pixels[case_id] = image, anns, array
    train, test = split_ids(images)
    for where, ids in (("train", train), ("test", test)):
        folder = public / where / "images"
        folder.mkdir(parents=True, exist_ok=True)
        for case_id in ids:
            Image.fromarray(pixels[case_id]).save(folder / images[case_id]["file_name"])
    _write_json(public / "train" / "annotations.json",
                _coco([images[i] for i in train], [a for i in train for a in annotations[i]]))
    _write_json(public / "test" / "images.json", {"images": [images[i] for i in test]})
    _write_json(private / "test_annotations.json",
                _coco([images[i] for i in test], [a for i in test for a in annotations[i]]))
    write_sample_submission(public, task.id_column, "predictions_json", test, lambda i: f"predictions/{i}.json")
    write_csv(private / "answers.csv", [task.id_column, "coco_image_id"],
              ({task.id_column: i, "coco_image_id": images[i]["id"]} for i in test))
    write_split(private, train, test)
