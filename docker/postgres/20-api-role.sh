#!/bin/sh
# The API's database role (docs/operations.md, "Database roles"), made by Postgres's entrypoint when the data volume is
# new. It owns nothing: `swapfarm db upgrade --api-role swapfarm_api` (compose's `migrate`) grants it what the API
# writes (jobs, events, sessions, keys' last use) after each migration, and never the schema.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v api_password="$API_POSTGRES_PASSWORD" <<'SQL'
CREATE ROLE swapfarm_api LOGIN PASSWORD :'api_password';
SQL
