"""Every option of every front end: defined once (``registry``, each an ``option.Option``), added
to pytest's and each command's parser (``adapters``), parsed into checked values (``values``),
listed in docs/options.md (``doc``). One spelling per option and front end."""
