/** Groups of users (not consumer groups: routes-groups.ts): list, create, read, delete. */
import type { FastifyInstance } from 'fastify';
import { FlowError } from '../../core/index.js';
import { NAME_PARAM, PAGE_QUERY, authorizeAdmin, notFound, paginate } from './common.js';
import type { ApiContext } from './types.js';
import { groupView } from './identity-common.js';

export function userGroupRoutes(app: FastifyInstance, ctx: ApiContext): void {
  const { access } = ctx;
  const dir = access.directory;

  app.get<{ Querystring: { limit?: number; cursor?: string } }>(
    '/api/v1/groups',
    {
      schema: {
        tags: ['groups'],
        summary: 'Groups (defined, or named by a user) with their members',
        querystring: { type: 'object', additionalProperties: false, properties: PAGE_QUERY },
      },
    },
    async (req) => {
      authorizeAdmin(access, req);
      return paginate(dir.listGroups().map(groupView), (g) => g.name, req.query);
    },
  );

  app.post<{ Body: { name: string; description?: string } }>(
    '/api/v1/groups',
    {
      schema: {
        tags: ['groups'],
        summary: 'Define a group',
        body: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: { name: { type: 'string' }, description: { type: 'string', maxLength: 1024 } },
        },
      },
    },
    async (req, reply) => {
      authorizeAdmin(access, req);
      if (dir.listGroups().some((g) => g.name === req.body.name && g.createdAt !== 0))
        throw new FlowError('ALREADY_EXISTS', `group "${req.body.name}" already exists`);
      const g = await dir.putGroup(req.body);
      return reply.code(201).send(groupView(dir.listGroups().find((x) => x.name === g.name) ?? g));
    },
  );

  app.get<{ Params: { name: string } }>('/api/v1/groups/:name', { schema: { tags: ['groups'], summary: 'One group', params: NAME_PARAM } }, async (req) => {
    authorizeAdmin(access, req);
    const g = dir.listGroups().find((x) => x.name === req.params.name);
    if (!g) throw notFound('group', req.params.name);
    return groupView(g);
  });

  app.delete<{ Params: { name: string } }>(
    '/api/v1/groups/:name',
    { schema: { tags: ['groups'], summary: 'Delete a group without members', params: NAME_PARAM } },
    async (req, reply) => {
      authorizeAdmin(access, req);
      await dir.deleteGroup(req.params.name);
      return reply.code(204).send();
    },
  );
}
