import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The rules service's own OpenAPI document (the gateway's openapi.yaml covers the gateway only). */
export const RULES_SERVICE_OPENAPI_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), 'rules-service.yaml');
