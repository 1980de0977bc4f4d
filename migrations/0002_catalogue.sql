-- Seed catalogue. Stock starts at initial_stock; version starts at 0.
INSERT INTO products (sku, name, price_cents, stock, initial_stock) VALUES
  ('SKU-TSHIRT', 'Cotton T-shirt',     1999, 1000, 1000),
  ('SKU-MUG',    'Ceramic mug',         1250, 1000, 1000),
  ('SKU-HOODIE', 'Zip hoodie',          4900,  500,  500),
  ('SKU-SOCKS',  'Wool socks (pair)',    899, 2000, 2000),
  ('SKU-CAP',    'Baseball cap',        1500,  800,  800),
  ('SKU-LIMITED','Limited print',      25000,   10,   10)
ON CONFLICT (sku) DO NOTHING;
