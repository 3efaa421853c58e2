"""A support-ticket triage agent whose model calls replay offline from recorded cassettes."""
