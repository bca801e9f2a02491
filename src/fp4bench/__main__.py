from fp4bench.cli.main import main

raise SystemExit(main())
