export { orderSaga, DEFAULT_SAGA_CONFIG, type SagaConfig } from './order-saga';
export * from './messages';
