#!/bin/sh
# The workers' database role (docs/operations.md, "Database roles"), made by Postgres's entrypoint when the data volume
# is new. It owns nothing and may do nothing yet: `swapfarm db upgrade --worker-role swapfarm_worker` (compose's
# `migrate`) grants it the job tables after each migration, and no access to the API keys.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v worker_password="$WORKER_POSTGRES_PASSWORD" <<'SQL'
CREATE ROLE swapfarm_worker LOGIN PASSWORD :'worker_password';
SQL
