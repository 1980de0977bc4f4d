/**
 * The OpenAPI 3.1 document served at GET /v1/openapi.json. The order's schema is generated from the
 * valibot schema the saga validates with (domain/order.ts), so the two cannot drift; the checks the
 * converter cannot express (they are code, not JSON Schema) are written out by hand beside it.
 */
import { toJsonSchema } from '@valibot/to-json-schema';
import { LIMITS, ORDER_STATUSES, OrderSchema } from '../domain/order';

/** What the generated schema cannot say: each check of OrderSchema that is a function, in words. */
export const CHECKS_BY_HAND = [
  'items: no two lines may have the same sku',
  `the order total (the sum of qty × unitPriceCents) must be more than 0 and at most ${LIMITS.maxTotalCents} cents`,
  'each line must be in the catalogue at that price and currency (checked against the database, not the schema)',
] as const;

/** The order's JSON Schema, from OrderSchema. A string with two patterns gets the second in `allOf`. */
function orderJsonSchema(): Record<string, unknown> {
  const schema = toJsonSchema(OrderSchema, {
    target: 'draft-2020-12',
    errorMode: 'ignore',
    overrideAction: ({ valibotAction, jsonSchema }) => {
      const action = valibotAction as { type: string; requirement?: unknown };
      if (action.type !== 'regex' || !jsonSchema.pattern || !(action.requirement instanceof RegExp)) return undefined;
      return { ...jsonSchema, allOf: [...(jsonSchema.allOf ?? []), { pattern: action.requirement.source }] };
    },
  }) as Record<string, unknown>;
  delete schema.$schema; // OpenAPI 3.1's dialect is the document's
  return { ...schema, description: 'The order. Also checked, beyond this schema:\n- ' + CHECKS_BY_HAND.join('\n- ') };
}

const error = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
});
const json = (ref: string, description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: `#/components/schemas/${ref}` } } },
});
const orderIdParam = { name: 'id', in: 'path', required: true, schema: { type: 'string' } };
const auth = { 401: error('no key, or not a key in use'), 429: error('over the rate limit; see Retry-After') };

/** The whole document. */
export function openApiDocument(): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: {
      title: 'order-saga orders API',
      version: '1',
      description:
        "The storefront's door to the order saga. Every request but /healthz, /readyz and this document needs `Authorization: Bearer <key>` (client.ts api-keys create).",
    },
    security: [{ bearer: [] }],
    paths: {
      '/v1/orders': {
        post: {
          summary: "Place an order: starts its saga and answers with the saga's early answer",
          parameters: [
            {
              name: 'Idempotency-Key',
              in: 'header',
              required: true,
              schema: { type: 'string', minLength: 1, maxLength: 255 },
              description:
                'The same key and body again returns the first answer (with `Idempotent-Replayed: true`); while the first is in flight, 409; with another body, 422.',
            },
          ],
          requestBody: {
            required: true,
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Order' } } },
          },
          responses: {
            202: {
              ...json('Placed', 'accepted: the stock is reserved and the saga runs on'),
              headers: { Location: { schema: { type: 'string' } } },
            },
            400: error('no Idempotency-Key, or a body that is not JSON'),
            409: error('out_of_stock, order_exists, request_in_flight, already_settled or order_failed'),
            413: error('body over the size limit'),
            415: error('Content-Type is not application/json'),
            422: error('invalid_order (naming the field), purchase_limit_exceeded or idempotency_key_reused'),
            503: error(
              'no_answer (no early answer in time) or unavailable (Temporal out of reach); send the same request again',
            ),
            ...auth,
          },
        },
        get: {
          summary: "A page of the storefront's orders, newest first",
          parameters: [
            { name: 'status', in: 'query', schema: { enum: [...ORDER_STATUSES] } },
            { name: 'customer', in: 'query', schema: { type: 'string' } },
            { name: 'cursor', in: 'query', schema: { type: 'string' }, description: "the previous page's `next`" },
            { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 100, default: 20 } },
          ],
          responses: { 200: json('Page', 'one page'), 400: error('a parameter named in `field`'), ...auth },
        },
      },
      '/v1/orders/{id}': {
        get: {
          summary: 'The order as its row in Postgres says',
          parameters: [orderIdParam],
          responses: { 200: json('OrderView', 'the order'), 404: error('no such order'), ...auth },
        },
      },
      '/v1/orders/{id}/cancel': {
        post: {
          summary: 'Cancel before the shipment: recorded on the order, then the saga compensates',
          parameters: [orderIdParam],
          requestBody: {
            required: false,
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  properties: { reason: { type: 'string', minLength: 1, maxLength: 200 } },
                  additionalProperties: false,
                },
              },
            },
          },
          responses: {
            202: json('Cancelled', 'accepted and recorded'),
            404: error('no such order'),
            409: error('past_pivot or already_ended, with the reason'),
            ...auth,
          },
        },
      },
    },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      schemas: {
        Order: orderJsonSchema(),
        Error: {
          type: 'object',
          required: ['error', 'message'],
          properties: { error: { type: 'string' }, message: { type: 'string' }, field: { type: 'string' } },
        },
        Placed: {
          type: 'object',
          required: ['orderId', 'status', 'url'],
          properties: { orderId: { type: 'string' }, status: { type: 'string' }, url: { type: 'string' } },
        },
        Cancelled: {
          type: 'object',
          required: ['orderId', 'cancel'],
          properties: { orderId: { type: 'string' }, cancel: { const: 'accepted' }, message: { type: 'string' } },
        },
        OrderView: {
          type: 'object',
          properties: {
            orderId: { type: 'string' },
            customerId: { type: 'string' },
            status: { enum: [...ORDER_STATUSES] },
            reason: { type: ['string', 'null'] },
            currency: { type: 'string' },
            items: { $ref: '#/components/schemas/Order/properties/items' },
            totalCents: { type: 'integer' },
            paymentFlow: {
              enum: ['authorization', 'charge'],
              description:
                'authorization: held at checkout, captured after the shipment; charge: an older order, charged before it',
            },
            authorizedCents: { type: 'integer', description: 'money held on the card (0 for a charge-era order)' },
            authorization: {
              enum: ['authorized', 'voided', 'captured', null],
              description: 'what became of the hold; null while none is known',
            },
            chargedCents: {
              type: 'integer',
              description: 'money taken: the capture, or the charge of a charge-era order',
            },
            refundedCents: { type: 'integer', description: 'money given back' },
            cancel: { type: ['object', 'null'], properties: { reason: { type: 'string' } } },
            nextStep: {
              type: ['object', 'null'],
              description: 'what a person must do before the order moves on; null when the saga moves it on by itself',
            },
            createdAt: { type: 'string', format: 'date-time' },
            updatedAt: { type: 'string', format: 'date-time' },
          },
        },
        Page: {
          type: 'object',
          required: ['orders'],
          properties: {
            orders: { type: 'array', items: { $ref: '#/components/schemas/OrderView' } },
            next: { type: 'string', description: 'the cursor of the next page; absent on the last' },
          },
        },
      },
    },
  };
}
