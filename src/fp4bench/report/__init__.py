"""How results read: fixed-width tables (``tables``, ``textfit``), and the report files of a run
(``data`` -> ``machine`` / ``plots`` -> ``document``)."""
