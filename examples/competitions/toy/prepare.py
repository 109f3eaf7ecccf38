"""The toy's preparer: the release's ``images/<id>.png`` and ``labels.csv`` in the prepared layout."""

from __future__ import annotations

import csv

from ...data.prepare.errors import PrepareError
from ...data.prepare.layout import Context, check_id, split_and_record, standard_outputs, write_csv


def prepare(ctx: Context) -> dict[str, int]:
    tables = ctx.files("labels.csv")
    if len(tables) != 1:
        raise PrepareError(f"{ctx.task.id}: expected one labels.csv under {ctx.raw}, found {len(tables)}")
    table = tables[0]
    with table.open(newline="", encoding="utf-8") as fh:
        labels = {check_id(ctx.task, row["image_id"], table): row["label"] for row in csv.DictReader(fh)}
    images = {p.stem: p for p in ctx.files("*.png")}
    missing = sorted(set(labels) - set(images))
    if missing:
        raise PrepareError(f"{ctx.task.id}: labels.csv names images that are not in the release: {missing[:5]}")
    train, test = split_and_record(sorted(labels), ctx)
    for case_id in train + test:
        where = "train" if case_id in train else "test"
        ctx.place(images[case_id], ctx.public / where / "images" / f"{case_id}.png")
    write_csv(ctx.public / "train_labels.csv", ["image_id", "label"],
              ({"image_id": i, "label": labels[i]} for i in train))
    standard_outputs(ctx, test, "label", lambda _: "0", "label", {i: labels[i] for i in test})
    return {"cases": len(labels), "train": len(train), "test": len(test)}
