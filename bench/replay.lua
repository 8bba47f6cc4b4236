-- wrk script: POST the same 1 KiB body (BODY_FILE) with one fixed
-- Idempotency-Key (REPLAY_KEY), which load.sh completes with one request
-- first: every request is then a replay of a completed delivery.
function init(args)
  local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
  local body = f:read("*a")
  f:close()
  req = wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = os.getenv("REPLAY_KEY") or "replay-1",
  }, body)
end

function request()
  return req
end
