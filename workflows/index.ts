export { orderSaga, DEFAULT_SAGA_CONFIG, type SagaConfig } from './order-saga';
export { reconcileWorkflow } from './reconcile';
export { sweeperWorkflow } from './sweeper';
export * from './messages';
