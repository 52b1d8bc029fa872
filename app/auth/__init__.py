"""Who is calling: participants by API key, admins by the admin key."""
