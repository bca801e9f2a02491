from fp4bench.cli import main

raise SystemExit(main())
