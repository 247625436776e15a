from llmscope.cli import main

raise SystemExit(main())
