from fp4bench.run.worker.child import main
from fp4bench.run.worker.quick_exit import quick_exit

quick_exit(main())
