/** Malformed orders, each with the field its error must name. Shared by the schema and CLI tests. */
const base = {
  orderId: 'ok-1',
  customerId: 'cust-1',
  currency: 'USD',
  paymentMethod: 'tok_visa',
  items: [{ sku: 'SKU-MUG', qty: 1, unitPriceCents: 1250 }],
};
const item = (over: Record<string, unknown>): Record<string, unknown> => ({
  ...base,
  items: [{ ...base.items[0], ...over }],
});

export const VALID_ORDER = base;

export const MALFORMED_ORDERS: { name: string; order: unknown; field: RegExp }[] = [
  { name: 'zero quantity', order: item({ qty: 0 }), field: /items\[0\]\.qty/ },
  { name: 'negative quantity', order: item({ qty: -3 }), field: /items\[0\]\.qty/ },
  { name: 'fractional quantity', order: item({ qty: 1.5 }), field: /items\[0\]\.qty/ },
  { name: 'huge quantity', order: item({ qty: 1e12 }), field: /items\[0\]\.qty/ },
  { name: 'quantity as a string', order: item({ qty: '2' }), field: /items\[0\]\.qty/ },
  { name: 'missing quantity', order: item({ qty: undefined }), field: /items\[0\]\.qty/ },
  { name: 'empty items', order: { ...base, items: [] }, field: /items/ },
  { name: 'items not an array', order: { ...base, items: { sku: 'SKU-MUG' } }, field: /items/ },
  {
    name: 'too many items',
    order: { ...base, items: Array.from({ length: 51 }, (_, i) => ({ sku: `SKU-${i}`, qty: 1, unitPriceCents: 1 })) },
    field: /items/,
  },
  {
    name: 'duplicate SKU line',
    order: { ...base, items: [base.items[0], base.items[0]] },
    field: /items\[1\]\.sku/,
  },
  { name: 'lower-case SKU', order: item({ sku: 'sku-mug' }), field: /items\[0\]\.sku/ },
  { name: 'empty SKU', order: item({ sku: '' }), field: /items\[0\]\.sku/ },
  { name: 'fractional cents', order: item({ unitPriceCents: 12.5 }), field: /items\[0\]\.unitPriceCents/ },
  { name: 'negative cents', order: item({ unitPriceCents: -1 }), field: /items\[0\]\.unitPriceCents/ },
  { name: 'cents as a string', order: item({ unitPriceCents: '1250' }), field: /items\[0\]\.unitPriceCents/ },
  { name: 'zero total', order: item({ unitPriceCents: 0 }), field: /items/ },
  { name: 'unknown item field', order: item({ discount: 5 }), field: /items\[0\]\.discount/ },
  { name: 'wrong currency', order: { ...base, currency: 'GBP' }, field: /currency/ },
  { name: 'lower-case currency', order: { ...base, currency: 'usd' }, field: /currency/ },
  { name: 'missing currency', order: { ...base, currency: undefined }, field: /currency/ },
  { name: 'empty order ID', order: { ...base, orderId: '' }, field: /orderId/ },
  { name: 'over-long order ID', order: { ...base, orderId: 'x'.repeat(65) }, field: /orderId/ },
  { name: 'order ID with a control character', order: { ...base, orderId: 'abc\u0007def' }, field: /orderId/ },
  { name: 'order ID with a newline', order: { ...base, orderId: 'abc\ndef' }, field: /orderId/ },
  { name: 'order ID with a slash', order: { ...base, orderId: 'a/b' }, field: /orderId/ },
  { name: 'order ID as a number', order: { ...base, orderId: 42 }, field: /orderId/ },
  { name: 'empty customer ID', order: { ...base, customerId: '' }, field: /customerId/ },
  { name: 'over-long customer ID', order: { ...base, customerId: 'c'.repeat(65) }, field: /customerId/ },
  { name: 'customer ID with a control character', order: { ...base, customerId: 'c\u0000' }, field: /customerId/ },
  { name: 'bad payment method', order: { ...base, paymentMethod: '4242424242424242' }, field: /paymentMethod/ },
  { name: 'unknown top-level field', order: { ...base, admin: true }, field: /admin/ },
  { name: 'an array instead of an object', order: [base], field: /order/ },
  { name: 'null', order: null, field: /order/ },
];
