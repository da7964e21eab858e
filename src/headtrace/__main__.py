from headtrace.cli import main

main()
