from fp4bench.worker.child import main

raise SystemExit(main())
