"""Record formats: how records are framed in a file, found again and checked.

TFRecord framing (:mod:`.framing`), its damage scan (:mod:`.damage`) and record index
(:mod:`.index`), the packed block layout (:mod:`.packed`) and ArrayRecord
(:mod:`.arrayrecord`). Imports only :mod:`tfr_hooks.tfrecord.schema` of the package's
folders. Each name has one address, in its module: this package re-exports nothing.
"""

__all__: list[str] = []
