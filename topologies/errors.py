"""Exception type raised for every invalid topology description or lookup."""

from __future__ import annotations


class TopologyError(ValueError):
    """A topology parameter, name or index is invalid.

    Subclasses ``ValueError`` so callers that treat bad input generically still
    catch it; the message always names the offending parameter and its value.
    """
