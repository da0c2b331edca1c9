-- Every event may name the project and the API key it is of (the schemas' versions after v2, PolicyEvent v9): what
-- PROJECT and API_KEY policies count by, kept beside tenant and subject. Null for events recorded before this
-- migration and for producers that name none. Not in the chain's hash of an entry: they are in its payload, whose
-- hash is, and `verify` checks these columns against it.
ALTER TABLE entries ADD COLUMN project TEXT;
ALTER TABLE entries ADD COLUMN api_key TEXT;
