"""What a topology is: the user's API (Spout, Bolt, Tuple, Context), the topology as data
and every definition-time check, options, the physical plan, live settings' parsers.
Imports only wire and groupings."""
