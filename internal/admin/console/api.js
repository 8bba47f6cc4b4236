// Where the console finds the admin API, and how it calls it. The page
// names the API's URL relative to its own (./ on Caddy's admin endpoint,
// api/ under the webhook_idempotency_console handler), so the console
// works on whatever host, loopback address or route prefix serves it. It
// is read once, when the page loads: the page's URL then changes only in
// its query (a source, a tab, an event), which a relative URL ignores.

const named = document.querySelector('meta[name="webhook-idempotency-api"]');
export const api = new URL(named ? named.content : './', location.href);
// a login typed into the URL (user:password@host) is the browser's to
// keep: a request to a URL that holds one is refused
api.username = '';
api.password = '';

// call sends a request to the API and returns its JSON answer (null for a
// 204); an error answer throws its message, with its status as `status`.
export async function call(method, path, query) {
	const url = new URL(path, api);
	if (query) url.search = query.toString();
	const resp = await fetch(url, { method, credentials: 'same-origin', cache: 'no-store' });
	if (resp.status === 204) return null;
	const body = await resp.json().catch(() => ({ error: resp.statusText }));
	if (!resp.ok) {
		const err = new Error(body.error || resp.statusText);
		err.status = resp.status;
		throw err;
	}
	return body;
}
