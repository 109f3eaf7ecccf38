"""SEG.A's raw files: one figshare article whose download nests a zip per centre."""

from __future__ import annotations

from ...data.prepare.sources import Part
from ...task import Task


def parts(task: Task) -> list[Part]:
    src = task.source
    return [Part(f"figshare article {src['article_id']} v{src.get('version', 1)}", "figshare", "article",
                 record=str(src["article_id"]), version=int(src.get("version", 1)), nested=True,
                 page=src.get("download_url"), many=True,
                 signature=(r"(\.seg\.nrrd$|/(dongyang|kits|rider)[^/]*\.zip$)",),
                 expects="SEG.A centre data (Dongyang/KiTS/Rider zips or <case>.seg.nrrd files)")]
