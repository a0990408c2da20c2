#!/usr/bin/env python3
"""A stand-in for the warehouse API that examples/inventory-sync.yaml calls.

    python3 examples/scripts/inventory-api.py 8089

serves, on 127.0.0.1 only:

    GET  /stock/SKU      {"sku": SKU, "available": 12, "warehouse": "berlin-1"}
    POST /reservations   {"sku", "quantity", "order"} -> 201 {"reservation": ...}

The first reservation request for each order is answered with 503, as a
warehouse service under load would, so that the example shows the http
handler retrying a 5xx. Standard library only; stop it with Ctrl-C.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STOCK = {"SHOE-42-BLK": 12, "SHOE-43-BLK": 0}
seen_orders = set()


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if not self.path.startswith("/stock/"):
            return self.reply(404, {"error": "not found"})
        sku = self.path[len("/stock/"):]
        self.reply(200, {"sku": sku, "available": STOCK.get(sku, 5), "warehouse": "berlin-1"})

    def do_POST(self):
        if self.path != "/reservations":
            return self.reply(404, {"error": "not found"})
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        order = req.get("order")
        if order not in seen_orders:
            seen_orders.add(order)
            return self.reply(503, {"error": "warehouse service is busy, try again"})
        self.reply(201, {"reservation": f"res-{order}", "sku": req.get("sku"), "quantity": req.get("quantity")})


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8089
    print(f"inventory API on http://127.0.0.1:{port}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
