"""dulwich's names for the bytes it takes: ``Ref`` (a ref's full name, ``refs/heads/main``)
and ``ObjectID`` (a 40-hex object id).

Recent dulwich declares both as NewTypes over ``bytes``, so its methods refuse plain bytes to
a type checker. mgit accepts dulwich releases back to 0.22, which need not define those names
the same way (or at all), so they are imported for the checker only, and these helpers tag
bytes with them: at run time each returns its argument unchanged. The places that hand mgit's
bytes to dulwich go through them, so the tagging is visible and in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref


def ref_name(name: bytes) -> Ref:
    """``name`` (a full ref name, encoded) as dulwich's ``Ref``."""
    return cast("Ref", name)


def object_id(sha: bytes) -> ObjectID:
    """``sha`` (a 40-hex object id, encoded) as dulwich's ``ObjectID``."""
    return cast("ObjectID", sha)
