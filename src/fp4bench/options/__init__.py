"""Options every front end takes (``registry``) and settings that no longer apply (``deprecated``)."""
