// bench/app/app.js - the slow application behind Caddy in bench/load.sh's
// application scenarios: one single-threaded Node `http` server (Node's
// standard library only) that handles a webhook the way a typical Node/NestJS
// handler does, with a few JSON parses and stringifies per request.
//
//	node bench/app/app.js <port> [<redis port>]
//
// APP_WORK (default 0) adds that many rounds of framework-like work to
// every request, replays included (a parse and two stringifies of the body,
// about 6 us each here), for an application slower than a bare `http`
// server, as one built on a framework such as NestJS is.
//
// With a Redis port it deduplicates by itself, as an application without
// webhook_idempotency in front would: an in-app guard on the Idempotency-Key
// header,
//
//	SET app:<key> processing NX PX 30000   -> OK: handle, then
//	SET app:<key> <answer> PX 86400000        and answer
//	                                        -> nil: GET app:<key>
//	                                           "processing": 409
//	                                           else: replay the stored answer
//
// over one Redis connection, commands written as they come and replies read
// in order (as Node Redis clients do), in RESP over a raw socket so that the
// application needs no npm package. Without a Redis port it only handles.
'use strict';

const http = require('http');
const net = require('net');

const port = Number(process.argv[2]);
const redisPort = process.argv[3] ? Number(process.argv[3]) : 0;
const work = Number(process.env.APP_WORK || 0);
if (!port) {
  console.error('usage: node app.js <port> [<redis port>]');
  process.exit(2);
}

// ---- a minimal pipelined RESP client ---------------------------------------
class Redis {
  constructor(port) {
    this.pending = []; // resolvers, in the order the commands were written
    this.buf = Buffer.alloc(0);
    this.sock = net.connect({ host: '127.0.0.1', port });
    this.sock.setNoDelay(true);
    this.sock.on('data', (d) => this.onData(d));
    this.sock.on('error', (e) => {
      console.error('redis:', e.message);
      process.exit(1);
    });
  }

  command(...args) {
    let s = '*' + args.length + '\r\n';
    for (const a of args) {
      s += '$' + Buffer.byteLength(a) + '\r\n' + a + '\r\n';
    }
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.sock.write(s);
    });
  }

  onData(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    for (;;) {
      const r = this.parse(0);
      if (!r) break;
      this.buf = this.buf.subarray(r.end);
      const p = this.pending.shift();
      if (r.err) p.reject(new Error(r.err));
      else p.resolve(r.value);
    }
  }

  // parse one reply at off: {value, end} or {err, end}, or null when
  // incomplete (the store's replies are simple strings, errors, integers
  // and bulk strings)
  parse(off) {
    const nl = this.buf.indexOf('\r\n', off);
    if (nl < 0) return null;
    const type = String.fromCharCode(this.buf[off]);
    const line = this.buf.toString('latin1', off + 1, nl);
    switch (type) {
      case '+':
        return { value: line, end: nl + 2 };
      case '-':
        return { err: line, end: nl + 2 };
      case ':':
        return { value: Number(line), end: nl + 2 };
      case '$': {
        const n = Number(line);
        if (n < 0) return { value: null, end: nl + 2 };
        if (this.buf.length < nl + 2 + n + 2) return null;
        return { value: this.buf.toString('utf8', nl + 2, nl + 2 + n), end: nl + 2 + n + 2 };
      }
    }
    throw new Error('unexpected RESP reply type ' + type);
  }
}

const redis = redisPort ? new Redis(redisPort) : null;

// ---- the application ----------------------------------------------------------
// handle does what a webhook handler typically does with an event: parse it,
// validate and map it (a copy through JSON, as DTO mapping does), log it, and
// answer with a small JSON document.
function handle(raw) {
  const event = JSON.parse(raw);
  const dto = JSON.parse(JSON.stringify(event));
  const logLine = JSON.stringify({ level: 'info', msg: 'webhook received', size: raw.length, keys: Object.keys(dto) });
  return JSON.stringify({ ok: true, received: logLine.length > 0 });
}

// framework stands for a framework's per-request work (APP_WORK).
function framework(raw) {
  let n = 0;
  for (let i = 0; i < work; i++) {
    n += JSON.stringify(JSON.parse(JSON.stringify(JSON.parse(raw)))).length;
  }
  return n;
}

function send(res, status, body, replayed) {
  const headers = { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) };
  if (replayed) headers['Idempotent-Replayed'] = 'true';
  res.writeHead(status, headers);
  res.end(body);
}

async function guarded(key, raw, res) {
  const k = 'app:' + key;
  const claimed = await redis.command('SET', k, 'processing', 'NX', 'PX', '30000');
  if (claimed === null) {
    const stored = await redis.command('GET', k);
    if (stored === 'processing') {
      send(res, 409, '{"error":"a delivery with this idempotency key is being processed"}');
      return;
    }
    if (stored !== null) {
      const answer = JSON.parse(stored);
      send(res, answer.status, answer.body, true);
      return;
    }
  }
  const body = handle(raw);
  await redis.command('SET', k, JSON.stringify({ status: 200, body }), 'PX', '86400000');
  send(res, 200, body);
}

// GET /stats answers how many connections and requests the application has
// seen, so that load.sh can tell how often the proxy opened a connection.
let connections = 0;
let requests = 0;

const server = http.createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/stats') {
    send(res, 200, JSON.stringify({ connections, requests }));
    return;
  }
  requests++;
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const raw = Buffer.concat(chunks).toString('utf8');
    framework(raw);
    const key = req.headers['idempotency-key'];
    if (!redis || !key) {
      send(res, 200, handle(raw));
      return;
    }
    guarded(key, raw, res).catch((e) => {
      send(res, 500, JSON.stringify({ error: e.message }));
    });
  });
});
server.on('connection', () => connections++);
server.keepAliveTimeout = 60000;
server.listen(port, '127.0.0.1');
