"""Errors of ``rexmle prepare``; each carries a message a user can act on without a traceback."""

from __future__ import annotations

from ...errors import RexmleError


class PrepareError(RexmleError):
    """Preparation cannot go on (bad raw data, a download that failed for good, an unsafe archive)."""


class ManualDownloadRequired(PrepareError):
    """A source needs a click in a browser (Google Drive); the message names the page and the file."""


class ChecksumMismatch(PrepareError):
    """A downloaded file does not match the MD5 the source publishes; the bad file is deleted."""


class UnsafeArchive(PrepareError):
    """An archive member would land outside the extraction folder, is a link out, or is too large."""


class NotEnoughDiskSpace(PrepareError):
    """The free space is below what the download and extraction need."""
