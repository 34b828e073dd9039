from prfaas.cli.app import main

main()
