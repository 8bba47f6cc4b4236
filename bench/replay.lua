-- wrk script: POST the same 1 KiB body (BODY_FILE) with one fixed
-- Idempotency-Key (REPLAY_KEY), which load.sh completes with one request
-- first: every request is then a replay of a completed delivery. The request
-- is formatted anew every time, as unique.lua does, so that wrk spends the
-- same CPU per request in every scenario (wrk shares the cores with Caddy).
function init(args)
  local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
  body = f:read("*a")
  f:close()
  headers = {
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = os.getenv("REPLAY_KEY") or "replay-1",
  }
end

function request()
  return wrk.format("POST", nil, headers, body)
end
