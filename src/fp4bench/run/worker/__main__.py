from fp4bench.run.worker.child import main

raise SystemExit(main())
