-- wrk script: POST a 1 KiB body (BODY_FILE) with a unique Idempotency-Key per
-- request: "<KEY_PREFIX>-<thread id>-<counter>". With WRK_LIMIT=n each thread
-- stops after n responses and creates "<DONE_FILE>.<thread id>" (load.sh then
-- ends wrk with SIGINT, as wrk otherwise sleeps out its -d duration).
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  prefix = os.getenv("KEY_PREFIX") or "k"
  limit = tonumber(os.getenv("WRK_LIMIT") or "0") or 0
  donefile = os.getenv("DONE_FILE")
  counter = 0
  responses = 0
  local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
  body = f:read("*a")
  f:close()
  headers = { ["Content-Type"] = "application/json" }
end

function request()
  counter = counter + 1
  headers["Idempotency-Key"] = prefix .. "-" .. tid .. "-" .. counter
  return wrk.format("POST", nil, headers, body)
end

-- defined only with WRK_LIMIT: wrk parses responses for Lua only when
-- the script has a response function, which costs throughput
if (tonumber(os.getenv("WRK_LIMIT") or "0") or 0) > 0 then
  function response(status, hdrs, b)
    responses = responses + 1
    if responses == limit then
      if donefile then
        local f = io.open(donefile .. "." .. tid, "w")
        if f then f:write(responses) f:close() end
      end
      wrk.thread:stop()
    end
  end
end
