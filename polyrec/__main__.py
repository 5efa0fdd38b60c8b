from polyrec.cli import main

main()
