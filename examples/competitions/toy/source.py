"""The toy's raw release: one archive, recognised by what it holds (whatever the file is called)."""

from __future__ import annotations

from ...data.prepare.sources import Signatures

#: release file name → (regexes that must each match a member path of the archive, words for users)
SIGNATURES: Signatures = {
    "ToyFundus.zip": ((r"/images/[^/]+\.png$", r"/labels\.csv$"),
                      "the toy fundus release (images/<id>.png and labels.csv)"),
}
