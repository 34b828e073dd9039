"""The `prfaas` command line."""
