//! The skills extension's methods (SEP-2640), both eras: `skills/list`, `skills/get`,
//! `resources/directory/read`, and the `skill://` files `resources/read` and
//! `resources/list` serve beside the registered resources.

use std::sync::Arc;

use serde_json::{Value, json};

use super::paging::page_value;
use super::{McpServer, to_value};
use crate::auth::Principal;
use crate::handler::{SkillsDirectory, SkillsError};
use crate::protocol::methods::{
    GetSkillParams, GetSkillResult, Method, ReadDirectoryParams, ResourceContents,
    ResourceDefinition, SKILL_SCHEME, SKILLS_EXTENSION,
};
use crate::protocol::{ErrorObject, Request};

impl McpServer {
    /// Serves `skills` (the skills extension, declared in the capabilities with
    /// `directoryRead`): `skills/list`, `skills/get`, `resources/directory/read`, each
    /// file through `resources/read` and each `SKILL.md` in `resources/list`. Declares
    /// the `resources` capability too.
    /// Anyone the server admits reads every skill unless [`McpServer::with_skill_scopes`]
    /// says otherwise.
    pub fn with_skills(mut self, skills: SkillsDirectory) -> Self {
        self.skills = Some(Arc::new(skills));
        self
    }

    /// The OAuth scopes a caller needs (`[auth]`), all of them, to list and read skills:
    /// `skills/list`, `skills/get`, `resources/directory/read`, `resources/read` and
    /// `resources/subscribe` of a `skill://` URI are refused without them as a tool call
    /// is (403, `insufficient_scope`), and `resources/list` leaves the `SKILL.md`
    /// manifests out. Without `[auth]` there is no caller to check. Empty (the default):
    /// the server-wide `auth.required_scopes` only.
    pub fn with_skill_scopes<S: Into<String>>(
        mut self,
        scopes: impl IntoIterator<Item = S>,
    ) -> Self {
        self.skill_scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// The scopes a skills method (`skills/list`, `skills/get`,
    /// `resources/directory/read`) needs, when skills are served; none for any other.
    pub(super) fn skills_method_scopes(&self, method: Method) -> Arc<[String]> {
        match method {
            Method::SkillsList | Method::SkillsGet | Method::ResourcesDirectoryRead
                if self.skills.is_some() =>
            {
                self.skill_scopes.clone()
            }
            _ => Arc::new([]),
        }
    }

    /// The scopes reading `uri` needs when it is a `skill://` URI and skills are served.
    pub(super) fn skill_file_scopes(&self, uri: &str) -> Option<Arc<[String]>> {
        self.skills
            .as_ref()
            .filter(|_| uri.starts_with(SKILL_SCHEME))
            .map(|_| self.skill_scopes.clone())
    }

    /// The extension's entry under `capabilities.extensions`, when skills are served.
    pub(super) fn skills_extension(&self) -> Option<(&'static str, Value)> {
        self.skills
            .as_ref()
            .map(|_| (SKILLS_EXTENSION, json!({ "directoryRead": true })))
    }

    /// Answers `skills/list`, `skills/get` or `resources/directory/read`; -32601 when no
    /// skills are served, -32602 for a URI that names no skill or directory.
    pub(super) fn skills_method(&self, request: Request) -> Result<Value, ErrorObject> {
        let Some(skills) = &self.skills else {
            return Err(ErrorObject::method_not_found(&request.method));
        };
        match request.kind {
            Method::SkillsList => page_value("skills", &skills.list(), &request),
            Method::SkillsGet => {
                let params: GetSkillParams = request.into_params()?;
                let skill = skills.get(&params.uri).map_err(invalid)?;
                to_value(&GetSkillResult { skill })
            }
            _ => {
                let params: ReadDirectoryParams = request.params_as()?;
                let children = skills.read_directory(&params.uri).map_err(invalid)?;
                page_value("resources", &children, &request)
            }
        }
    }

    /// The resources `resources/list` shows `caller`: the registered ones, then each
    /// skill's `SKILL.md` when its scopes allow.
    pub(super) fn listed_resources(&self, caller: Option<&Principal>) -> Vec<ResourceDefinition> {
        let mut resources = self.resources.get().list_for(caller);
        let allowed = caller.is_none_or(|p| p.has_scopes(&self.skill_scopes));
        if let Some(skills) = self.skills.as_ref().filter(|_| allowed) {
            resources.extend(skills.manifests());
        }
        resources
    }

    /// The contents of skill file `uri`, when it is one.
    pub(super) fn read_skill_file(&self, uri: &str) -> Option<ResourceContents> {
        let skills = self
            .skills
            .as_ref()
            .filter(|_| uri.starts_with(SKILL_SCHEME))?;
        skills.read_file(uri).ok()
    }
}

fn invalid(error: SkillsError) -> ErrorObject {
    ErrorObject::invalid_params(format!("Invalid params: {error}"))
}
